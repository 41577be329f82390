/* comm_bench - dcp_nccl.h's communicators at scale, on the host transport (tests/fake_nccl: NCCL
   and CUDA stand-ins, every rank a thread with a device thread; no GPU, no NCCL library).

   Per pool size D (--ranks, default 1024 and 8192), every rank a thread:
   - set creation as the layer does it (dcp_nccl_set_create), and today's path beside it in
     the same run: one ncclCommSplit per CP size 2, 4, .., max_cp (color rank / c, key
     rank % c), as dcp_nccl.h did up to issue 37; for each, the communicators every rank made
     and holds (the transport counts them), and the set-up time (the slowest rank's, after a
     barrier; the transport's host work, not NCCL's -- a ratio of work, not a GPU time);
   - the per-microbatch switch (dcp_nccl_set_switch_plan) at 8,192 samples on 1,024 ranks
     (lognormal lengths, mean 4,096, sigma 1.4, clipped to 256 .. 65,536; 4,096 tokens per
     rank), timed on rank 0 alone while the others wait;
   and from the plans alone (the pure functions the layer executes; D = 1,024 and 8,192, CP
   sizes pow2 and any): the distinct pool ranks each rank sends to in the plan's rings, in the
   ring order of dcp_ring_order and in the former order (r + 1 within the group), in its
   all-to-alls (every other member of its groups), and in the agreement's tree.

   Built twice by `make bench-comm`: against this tree's dcp.h / dcp_nccl.h (build/comm_bench)
   and against main's (build/comm_bench-base, headers from `git show $(BASE):`), so that the set
   creation and the switch are timed before and after in the same command. The base build
   skips what its API lacks (the plan peers need dcp_ring_order). Prints tables; the figures
   go into bench/RESULTS.md.

   Usage: comm_bench [--ranks D]... [--no-threads] [--switch-reps N] */
#define _POSIX_C_SOURCE 200809L
#include "fake_runtime.c"

#define DCP_IMPLEMENTATION
#include "dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "dcp_nccl.h"
#include "no_kernels.h"

#include <math.h>

#define BENCH_SEED 37
#define BENCH_MAX_POOLS 4
#define DEFAULT_SWITCH_REPS 200
#define RANK_STACK_BYTES ((size_t)256 << 10) /* small: thousands of rank threads */
#define SWITCH_RANKS 1024
#define SWITCH_SAMPLES 8192
#define TOKENS_PER_RANK 4096
#define LOGNORMAL_MEAN 4096.0
#define LOGNORMAL_SIGMA 1.4
#define LOGNORMAL_MIN 256
#define LOGNORMAL_MAX 65536
/* samples per rank of the peer plans at D ranks */
#define PEER_SAMPLES_PER_RANK 8
/* The timeout of the benched sets, and the transport's bound on a host wait: generous,
   thousands of threads share two cores (a rank's parent in a tree may run minutes later). */
#define BENCH_TIMEOUT_MS INT64_C(3600000)
#define BENCH_HANG_MS 3600000.0
/* The sets' staging buffer: small, as the bench broadcasts nothing (the default 1 MiB, poisoned
   by the transport's cudaMalloc, is 8 GiB of host memory at 8,192 ranks). */
#define BENCH_STAGING_BYTES 4096
/* Ranks of the pool whose rings of every size and position are swept (spread over it). */
#define SWEEP_RANKS 8
/* Communicators a rank can make on today's path: one per CP size up to 2^20 ranks. */
#define LEGACY_MAX_SPLITS 21

static double now_ms(void) { return fake_now_ms(); }

/* -------------------------------------------------------------------- ranks as threads */

typedef struct pool_run {
    int ranks;
    const dcp_plan *switch_plan; /* NULL: no switch timing */
    int switch_reps;
    pthread_barrier_t barrier;
    double *set_ms, *legacy_ms;  /* [rank] */
    long *set_made, *legacy_made, *legacy_held;
    double switch_ns;            /* rank 0's mean per switch */
    double switch_unsealed_ns;   /* the same on an unsealed copy, validated at every call */
    int failures;
    pthread_mutex_t lock;
} pool_run;

typedef struct rank_arg {
    pool_run *run;
    int rank;
    ncclComm_t pool;
} rank_arg;

static void note_failure(pool_run *run, int rank, const char *what, const char *detail)
{
    pthread_mutex_lock(&run->lock);
    if (run->failures++ == 0) fprintf(stderr, "rank %d: %s: %s\n", rank, what, detail);
    pthread_mutex_unlock(&run->lock);
}

/* The plan as every use saw it before plans were validated once: a copy of the struct with its
   seal cleared, which the library validates in full at each use (dcp_plan_trusted). */
static dcp_plan unsealed_copy(const dcp_plan *plan)
{
    dcp_plan copy = *plan;
    copy.seal = 0;
    return copy;
}

/* Rank 0 switches through every microbatch of `plan` switch_reps times; the mean per call in
   ns, or a negative value after a failure. */
static double mean_switch_ns(pool_run *run, dcp_nccl_set *set, const dcp_plan *plan)
{
    dcp_nccl_binding binding;
    dcp_error err;
    double start = now_ms();
    int rep, k, calls = 0;
    for (rep = 0; rep < run->switch_reps; rep++)
        for (k = 0; k < plan->num_microbatches; k++, calls++)
            if (dcp_nccl_set_switch_plan(set, plan, k, &binding, &err) != DCP_OK) {
                note_failure(run, 0, "dcp_nccl_set_switch_plan", err.message);
                return -1.0;
            }
    return (now_ms() - start) * 1e6 / (calls ? calls : 1);
}

/* The switch on the sealed plan, and on its unsealed copy (validated at every call). */
static void time_switch(pool_run *run, dcp_nccl_set *set)
{
    const dcp_plan copy = unsealed_copy(run->switch_plan);
    run->switch_ns = mean_switch_ns(run, set, run->switch_plan);
    run->switch_unsealed_ns = mean_switch_ns(run, set, &copy);
}

/* Today's path: one split of the pool per CP size 2, 4, .. max_cp; returns how many this rank
   holds, destroys them after. */
static long legacy_splits(pool_run *run, int rank, ncclComm_t pool, int max_cp)
{
    ncclComm_t comms[LEGACY_MAX_SPLITS];
    long held = 0, i;
    int cp;
    for (cp = 2; cp <= max_cp && held < LEGACY_MAX_SPLITS; cp *= 2) {
        const int full = rank < run->ranks / cp * cp;
        ncclComm_t child = NULL;
        if (ncclCommSplit(pool, full ? rank / cp : NCCL_SPLIT_NOCOLOR, full ? rank % cp : 0,
                          &child, NULL) != ncclSuccess)
            note_failure(run, rank, "ncclCommSplit", "failed");
        if (child) comms[held++] = child;
    }
    for (i = 0; i < held; i++) (void)ncclCommDestroy(comms[i]);
    return held;
}

static void *bench_rank(void *argument)
{
    rank_arg *a = (rank_arg *)argument;
    pool_run *run = a->run;
    dcp_nccl_options options;
    dcp_nccl_set *set = NULL;
    dcp_error err;
    long made = 0, alive = 0, before = 0;
    double start;
    int max_cp = 1;
    fake_bind_rank(a->rank);
    memset(&options, 0, sizeof options);
    options.timeout_ms = BENCH_TIMEOUT_MS, options.staging_bytes = BENCH_STAGING_BYTES;
    if (run->switch_plan) options.plan_config = &run->switch_plan->config;
    pthread_barrier_wait(&run->barrier);
    start = now_ms();
    if (dcp_nccl_set_create(a->pool, &options, &set, &err) != DCP_OK)
        note_failure(run, a->rank, "dcp_nccl_set_create", err.message);
    run->set_ms[a->rank] = now_ms() - start;
    fake_comm_tally(a->rank, &made, &alive);
    run->set_made[a->rank] = made;
    if (set) max_cp = set->max_cp;
    pthread_barrier_wait(&run->barrier);
    if (set && run->switch_plan && a->rank == 0) time_switch(run, set);
    pthread_barrier_wait(&run->barrier);
    if (set && dcp_nccl_set_destroy(set, &err) != DCP_OK)
        note_failure(run, a->rank, "dcp_nccl_set_destroy", err.message);
    while (max_cp * 2 <= run->ranks) max_cp *= 2; /* today's default: the largest power of 2 */
    fake_comm_tally(a->rank, &before, &alive);
    pthread_barrier_wait(&run->barrier);
    start = now_ms();
    run->legacy_held[a->rank] = legacy_splits(run, a->rank, a->pool, max_cp);
    run->legacy_ms[a->rank] = now_ms() - start;
    fake_comm_tally(a->rank, &made, &alive);
    run->legacy_made[a->rank] = made - before;
    (void)ncclCommDestroy(a->pool);
    return NULL;
}

static double slowest(const double *ms, int n)
{
    double worst = 0.0;
    int i;
    for (i = 0; i < n; i++)
        if (ms[i] > worst) worst = ms[i];
    return worst;
}

static long most(const long *x, int n)
{
    long m = 0;
    int i;
    for (i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

/* One pool of `ranks` threads: both creation paths and, with a plan, the switch. */
static int run_pool(int ranks, const dcp_plan *switch_plan, int switch_reps)
{
    ncclComm_t *pools = (ncclComm_t *)calloc((size_t)ranks, sizeof(ncclComm_t));
    pthread_t *threads = (pthread_t *)calloc((size_t)ranks, sizeof(pthread_t));
    rank_arg *args = (rank_arg *)calloc((size_t)ranks, sizeof(rank_arg));
    pool_run run;
    pthread_attr_t attr;
    double wall = now_ms();
    int r;
    memset(&run, 0, sizeof run);
    run.ranks = ranks, run.switch_plan = switch_plan, run.switch_reps = switch_reps;
    run.set_ms = (double *)calloc((size_t)ranks, sizeof(double));
    run.legacy_ms = (double *)calloc((size_t)ranks, sizeof(double));
    run.set_made = (long *)calloc((size_t)ranks, sizeof(long));
    run.legacy_made = (long *)calloc((size_t)ranks, sizeof(long));
    run.legacy_held = (long *)calloc((size_t)ranks, sizeof(long));
    pthread_mutex_init(&run.lock, NULL);
    pthread_barrier_init(&run.barrier, NULL, (unsigned)ranks);
    fake_set_hang_bound(BENCH_HANG_MS);
    fake_job_create(ranks, NULL, pools);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, RANK_STACK_BYTES);
    for (r = 0; r < ranks; r++) {
        args[r].run = &run, args[r].rank = r, args[r].pool = pools[r];
        if (pthread_create(&threads[r], &attr, bench_rank, &args[r]) != 0) {
            fprintf(stderr, "cannot start rank thread %d of %d\n", r, ranks);
            exit(1);
        }
    }
    for (r = 0; r < ranks; r++) pthread_join(threads[r], NULL);
    pthread_attr_destroy(&attr);
    {
        const char *text = "";
        if (fake_violations(&text)) note_failure(&run, -1, "host transport", text);
    }
    fake_job_destroy();
    printf("%6d ranks: the set: %ld communicator made per rank (%ld held with the pool), "
           "set-up %.0f ms | one per CP size: %ld made (%ld held), %.0f ms | ratio %.2f | "
           "wall %.1f s\n",
           ranks, most(run.set_made, ranks), most(run.set_made, ranks) + 1,
           slowest(run.set_ms, ranks), most(run.legacy_made, ranks),
           most(run.legacy_held, ranks) + 1, slowest(run.legacy_ms, ranks),
           slowest(run.legacy_ms, ranks) / (slowest(run.set_ms, ranks) + 1e-9),
           (now_ms() - wall) / 1e3);
    if (switch_plan)
        printf("        switch (dcp_nccl_set_switch_plan), %d samples x %d ranks, %d "
               "microbatches: %.0f ns per call (rank 0, mean of %d passes); validated in full "
               "at every call (an unsealed copy, as before plans were validated once): %.0f ns, "
               "ratio %.0f\n",
               switch_plan->num_samples, ranks, switch_plan->num_microbatches, run.switch_ns,
               switch_reps, run.switch_unsealed_ns,
               run.switch_unsealed_ns / (run.switch_ns > 0 ? run.switch_ns : 1.0));
    pthread_barrier_destroy(&run.barrier);
    pthread_mutex_destroy(&run.lock);
    free(run.set_ms), free(run.legacy_ms), free(run.set_made), free(run.legacy_made);
    free(run.legacy_held), free(pools), free(threads), free(args);
    return run.failures;
}

/* ------------------------------------------------------------------------------ plans */

/* The heavy-tailed batch: n lognormal lengths on `ranks` ranks, CP sizes `sizes`. */
static dcp_plan *bench_plan(int ranks, int n, dcp_cp_sizes sizes)
{
    dcp_lognormal dist;
    dcp_config config;
    int64_t *lengths = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    dcp_plan *plan = NULL;
    dcp_error err;
    dist.mean = LOGNORMAL_MEAN, dist.sigma = LOGNORMAL_SIGMA;
    dist.min_length = LOGNORMAL_MIN, dist.max_length = LOGNORMAL_MAX;
    memset(&config, 0, sizeof config);
    config.ranks = ranks, config.max_tokens_per_rank = TOKENS_PER_RANK, config.cp_sizes = sizes;
    if (dcp_lengths_lognormal(&dist, BENCH_SEED, lengths, n, &err) != DCP_OK ||
        dcp_plan_create(&config, lengths, n, &plan, &err) != DCP_OK)
        fprintf(stderr, "plan of %d samples on %d ranks: %s\n", n, ranks, err.message);
    free(lengths);
    return plan;
}

#if defined(DCP_COMM_TREE_ARITY) /* this tree's dcp.h: the ring order and the tree exist */

/* Adds peer to a rank's set of distinct peers (a bitmap of the pool's ranks). */
static void add_peer(unsigned char *seen, int32_t peer, long *count)
{
    if (!seen[peer]) seen[peer] = 1, (*count)++;
}

typedef struct peer_counts {
    long ring, former_ring, a2a, tree; /* the most over ranks */
    double ring_mean, former_mean, a2a_mean;
} peer_counts;

/* A rank's distinct send peers over the plan: rings in dcp_ring_order and in the former order
   (r + 1 within the group), all-to-alls (every other member of each group), the agreement's
   tree over the pool. */
static void rank_peers(const dcp_plan *plan, int32_t rank, unsigned char *seen, long *out)
{
    const int32_t D = plan->config.ranks;
    dcp_comm_tree node;
    int32_t k, j, kind;
    for (kind = 0; kind < 3; kind++) {
        memset(seen, 0, (size_t)D);
        out[kind] = 0;
        for (k = 0; k < plan->num_microbatches; k++) {
            dcp_rank_group where;
            dcp_ring_exchange x;
            const dcp_comm_choice *c = &where.choice;
            if (dcp_plan_rank_group(plan, rank, k, &where, NULL) != DCP_OK || c->cp < 2) continue;
            if (kind == 0 && dcp_ring_exchange_plan(c->cp, c->rank_in_group, 0, &x, NULL) == DCP_OK)
                add_peer(seen, c->first_rank + x.next, &out[0]);
            if (kind == 1) add_peer(seen, c->first_rank + (c->rank_in_group + 1) % c->cp, &out[1]);
            for (j = 0; kind == 2 && j < c->cp; j++)
                if (j != c->rank_in_group) add_peer(seen, c->first_rank + j, &out[2]);
        }
    }
    (void)dcp_comm_tree_node(D, 0, rank, &node, NULL);
    out[3] = (node.parent >= 0) + node.num_children;
}

static peer_counts plan_peers(const dcp_plan *plan)
{
    const int32_t D = plan->config.ranks;
    unsigned char *seen = (unsigned char *)malloc((size_t)D);
    peer_counts p;
    double sums[3] = {0, 0, 0};
    int32_t r;
    memset(&p, 0, sizeof p);
    for (r = 0; r < D; r++) {
        long n[4];
        rank_peers(plan, r, seen, n);
        if (n[0] > p.ring) p.ring = n[0];
        if (n[1] > p.former_ring) p.former_ring = n[1];
        if (n[2] > p.a2a) p.a2a = n[2];
        if (n[3] > p.tree) p.tree = n[3];
        sums[0] += (double)n[0], sums[1] += (double)n[1], sums[2] += (double)n[2];
    }
    p.ring_mean = sums[0] / D, p.former_mean = sums[1] / D, p.a2a_mean = sums[2] / D;
    free(seen);
    return p;
}

/* Rings of every size 2 .. D at every position that holds rank r (what a plan under
   DCP_CP_SIZES_ANY may give it over time): the distinct pool ranks r sends to, in dcp_ring_order
   and in the former order (r + 1 within the group). */
static void sweep_rank(int32_t D, int32_t r, unsigned char *seen, long *ring, long *former)
{
    int32_t cp, first;
    memset(seen, 0, (size_t)D);
    *ring = 0;
    for (cp = 2; cp <= D; cp++)
        for (first = r - cp + 1 > 0 ? r - cp + 1 : 0; first <= r && first + cp <= D; first++) {
            dcp_ring_exchange x;
            if (dcp_ring_exchange_plan(cp, r - first, 0, &x, NULL) == DCP_OK)
                add_peer(seen, first + x.next, ring);
        }
    memset(seen, 0, (size_t)D);
    *former = 0;
    for (cp = 2; cp <= D; cp++)
        for (first = r - cp + 1 > 0 ? r - cp + 1 : 0; first <= r && first + cp <= D; first++)
            add_peer(seen, first + (r - first + 1) % cp, former);
}

static void print_sweep(int32_t D)
{
    unsigned char *seen = (unsigned char *)malloc((size_t)D);
    long ring = 0, former = 0, most_ring = 0, most_former = 0;
    const double start = now_ms();
    int32_t i;
    for (i = 0; i < SWEEP_RANKS; i++) {
        sweep_rank(D, (int32_t)((int64_t)D * i / SWEEP_RANKS + i % 2), seen, &ring, &former);
        if (ring > most_ring) most_ring = ring;
        if (former > most_former) most_former = former;
    }
    printf("%6d ranks, rings of every size 2..%d at every position (%d ranks swept): distinct "
           "send peers per rank, most: %ld in dcp_ring_order, %ld in the former order (%.0f ms)\n",
           D, D, SWEEP_RANKS, most_ring, most_former, now_ms() - start);
    free(seen);
}

static void print_peers(int ranks)
{
    static const dcp_cp_sizes sets[] = {DCP_CP_SIZES_POW2, DCP_CP_SIZES_ANY};
    size_t i;
    for (i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        const double start = now_ms();
        dcp_plan *plan = bench_plan(ranks, PEER_SAMPLES_PER_RANK * ranks, sets[i]);
        peer_counts p;
        if (!plan) continue;
        p = plan_peers(plan);
        printf("%6d ranks, %-4s %6d samples, %3d microbatches: distinct send peers per rank "
               "(most / mean): rings %ld / %.2f (former order r + 1: %ld / %.2f), all-to-alls "
               "%ld / %.1f, agreement tree %ld (plan %.0f ms)\n",
               ranks, dcp_cp_sizes_name(sets[i]), plan->num_samples, plan->num_microbatches,
               p.ring, p.ring_mean, p.former_ring, p.former_mean, p.a2a, p.a2a_mean, p.tree,
               now_ms() - start);
        dcp_plan_destroy(plan);
    }
    print_sweep(ranks);
}
#else
static void print_peers(int ranks)
{
    printf("%6d ranks: plan peers need dcp_ring_order (not in this build's dcp.h)\n", ranks);
}
#endif

/* Rank 0's view of every microbatch (dcp_rank_view_create and destroy), on the sealed plan
   and on its unsealed copy; the mean per view in ns, each of `reps` passes. */
static double views_ns(const dcp_plan *plan, int reps)
{
    dcp_rank_view *view = NULL;
    dcp_error err;
    double start = now_ms();
    int rep, k, calls = 0;
    for (rep = 0; rep < reps; rep++)
        for (k = 0; k < plan->num_microbatches; k++, calls++) {
            if (dcp_rank_view_create(plan, 0, k, &view, &err) != DCP_OK) {
                fprintf(stderr, "dcp_rank_view_create: %s\n", err.message);
                return -1.0;
            }
            dcp_rank_view_destroy(view);
        }
    return (now_ms() - start) * 1e6 / (calls ? calls : 1);
}

static int print_views(const dcp_plan *plan, int reps)
{
    const dcp_plan copy = unsealed_copy(plan);
    const double sealed = views_ns(plan, reps), unsealed = views_ns(&copy, reps);
    printf("rank view (dcp_rank_view_create + destroy, rank 0, every microbatch), %d samples x %d "
           "ranks: %.0f ns per view (mean of %d passes); validated in full at every call (an "
           "unsealed copy): %.0f ns, ratio %.0f\n",
           plan->num_samples, plan->config.ranks, sealed, reps, unsealed,
           unsealed / (sealed > 0 ? sealed : 1.0));
    return sealed < 0 || unsealed < 0;
}

int main(int argc, char **argv)
{
    int pools[BENCH_MAX_POOLS], count = 0, threads = 1, reps = DEFAULT_SWITCH_REPS, i,
        failures = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc && count < BENCH_MAX_POOLS)
            pools[count++] = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-threads") == 0)
            threads = 0;
        else if (strcmp(argv[i], "--switch-reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--ranks D]... [--no-threads] [--switch-reps N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (count == 0) pools[count++] = SWITCH_RANKS, pools[count++] = 8 * SWITCH_RANKS;
    printf("comm_bench: dcp.h %d.%d.%d, NCCL stand-in %d (host transport: set-up times are its "
           "host work on this machine, not NCCL's)\n",
           DCP_VERSION_MAJOR, DCP_VERSION_MINOR, DCP_VERSION_PATCH, NCCL_VERSION_CODE);
    for (i = 0; i < count; i++) print_peers(pools[i]);
    for (i = 0; threads && i < count; i++) {
        dcp_plan *plan =
            pools[i] == SWITCH_RANKS ? bench_plan(SWITCH_RANKS, SWITCH_SAMPLES, DCP_CP_SIZES_POW2)
                                     : NULL;
        if (plan) failures += print_views(plan, reps);
        failures += run_pool(pools[i], plan, reps);
        dcp_plan_destroy(plan);
    }
    if (failures) printf("FAILED: %d failures\n", failures);
    return failures ? 1 : 0;
}
