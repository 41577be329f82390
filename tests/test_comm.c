/* Distributed logic: everything dcp_nccl.h decides, run on simulated ranks on the CPU
   (docs/DESIGN.md section 6). The ring order (a permutation whose neighbours are r +- 1 or
   r +- 2, so that rings of every size and position reach at most four pool ranks), the tree of
   broadcasts and reductions, groups of any size and position against the groups of random
   plans; the per-microbatch switch and the evaluation override (seed 003: train at CP 1,
   evaluate at CP 4, and back, restored on every path); reroute lists executed as NCCL would
   (sends and receives paired by order and byte count only); the ring's peers and double
   buffers, by message passing up to 1024 ranks and by driving the CPU reference kernels the
   way the NCCL driver does, compared with dcp_ring_attention_forward/backward; scratch
   layouts; the length-first metadata broadcast through a small staging buffer. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

#define SIMULATION_SEED 7007

/* A random feasible workload and its plan (any strategy, any set of CP sizes), ranks in
   [1, max_ranks]. */
static dcp_plan *random_plan(dcp_rng *rng, int32_t max_ranks, int32_t max_samples)
{
    static const dcp_cp_sizes sets[] = {DCP_CP_SIZES_POW2, DCP_CP_SIZES_MEGATRON,
                                        DCP_CP_SIZES_ANY};
    dcp_config c = make_config(1 + (int32_t)dcp_rng_below(rng, (uint64_t)max_ranks),
                               16 + (int64_t)dcp_rng_below(rng, 512));
    int64_t lengths[256];
    int32_t count = 1 + (int32_t)dcp_rng_below(rng, (uint64_t)max_samples), i, top = 1;
    dcp_plan *plan = NULL;
    while (top * 2 <= c.ranks) top *= 2;
    c.pad_multiple = 1 + (int32_t)dcp_rng_below(rng, 3);
    c.strategy = (dcp_strategy)dcp_rng_below(rng, 3);
    c.cp_sizes = sets[dcp_rng_below(rng, TEST_COUNT(sets))];
    for (i = 0; i < count; i++) {
        int64_t longest = top * c.max_tokens_per_rank / 2;
        lengths[i] = 1 + (int64_t)dcp_rng_below(
                             rng, (uint64_t)(dcp_rng_below(rng, 3) ? longest / 8 + 1 : longest));
    }
    if (dcp_plan_create(&c, lengths, count, &plan, NULL) != DCP_OK) return NULL;
    return plan;
}

/* ------------------------------------------------------------------ the ring order */

/* Every cp: the order is a permutation, dcp_ring_position its inverse, and each rank's
   neighbours are r +- 1 or r +- 2 (the planted bug "a ring order that touches a 5th peer"
   fails here and in ring_peers_stay_within_two below). */
static void ring_order_is_a_permutation_of_near_neighbours(void)
{
    static const int32_t large[] = {511, 512, 1000, 1024, 4099};
    dcp_error error;
    int32_t i, rank = 0, position = 0, failures = 0;
    for (i = 0; i < 300 + TEST_COUNT(large); i++) {
        const int32_t cp = i < 300 ? i + 1 : large[i - 300];
        unsigned char *seen = (unsigned char *)calloc((size_t)cp, 1);
        int32_t p;
        for (p = 0; p < cp; p++) {
            int32_t r, next, back = -1;
            CHECK_EQ(dcp_ring_order(cp, p, &r, NULL), DCP_OK);
            CHECK_EQ(dcp_ring_order(cp, (p + 1) % cp, &next, NULL), DCP_OK);
            CHECK_EQ(dcp_ring_position(cp, r, &back, NULL), DCP_OK);
            if (r < 0 || r >= cp || seen[r] || back != p) {
                failures++;
                continue;
            }
            seen[r] = 1;
            if (cp > 1 && !(abs(next - r) == 1 || abs(next - r) == 2)) failures++;
        }
        free(seen);
    }
    CHECK_EQ(failures, 0);
    CHECK_EQ(dcp_ring_order(5, 0, &rank, NULL), DCP_OK); /* 0 2 4 3 1 */
    CHECK_EQ(dcp_ring_order(5, 3, &rank, NULL), DCP_OK);
    CHECK_EQ(rank, 3);
    CHECK_EQ(dcp_ring_position(6, 1, &position, NULL), DCP_OK); /* 0 2 4 5 3 1 */
    CHECK_EQ(position, 5);
    CHECK_EQ(dcp_ring_order(0, 0, &rank, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "got 0");
    CHECK_EQ(dcp_ring_order(DCP_MAX_RANKS + 1, 0, &rank, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_order(4, 4, &rank, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "position");
    CHECK_EQ(dcp_ring_position(4, -1, &position, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_position(4, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* Across every group size and position of a pool, the pool ranks a rank's rings send to (and
   receive from) are among r - 2, r - 1, r + 1, r + 2: at most four peers. */
static void ring_peers_stay_within_two(void)
{
    static const int32_t pools[] = {48, 130};
    int32_t i, failures = 0;
    for (i = 0; i < TEST_COUNT(pools); i++) {
        const int32_t D = pools[i];
        int32_t cp, first, j, s;
        for (cp = 2; cp <= D; cp++)
            for (first = 0; first + cp <= D; first++)
                for (j = 0; j < cp; j++)
                    for (s = 0; s < (cp < 4 ? cp : 2); s++) { /* next/prev are per rank */
                        dcp_ring_exchange x;
                        CHECK_EQ(dcp_ring_exchange_plan(cp, j, s, &x, NULL), DCP_OK);
                        if (abs(x.next - j) < 1 || abs(x.next - j) > 2 ||
                            abs(x.prev - j) < 1 || abs(x.prev - j) > 2)
                            failures++;
                    }
    }
    CHECK_EQ(failures, 0);
}

/* Random plans (every set of sizes, groups anywhere): each rank's distinct ring peers over all
   microbatches, in pool ranks, are at most four. */
static void plan_rings_send_to_at_most_four_peers(void)
{
    dcp_rng rng;
    int w, worst = 0;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED) + 5);
    for (w = 0; w < 30; w++) {
        dcp_plan *plan = random_plan(&rng, 96, 120);
        int32_t rank, k;
        CHECK(plan != NULL);
        if (!plan) continue;
        for (rank = 0; rank < plan->config.ranks; rank++) {
            int32_t peers[8], count = 0, i;
            for (k = 0; k < plan->num_microbatches; k++) {
                dcp_rank_group where;
                dcp_ring_exchange x;
                int32_t peer;
                CHECK_EQ(dcp_plan_rank_group(plan, rank, k, &where, NULL), DCP_OK);
                if (where.choice.cp < 2) continue;
                CHECK_EQ(dcp_ring_exchange_plan(where.choice.cp, where.choice.rank_in_group, 0,
                                                &x, NULL),
                         DCP_OK);
                peer = where.choice.first_rank + x.next;
                for (i = 0; i < count && peers[i] != peer; i++) {
                }
                if (i == count && count < 8) peers[count++] = peer;
            }
            if (count > worst) worst = count;
        }
        dcp_plan_destroy(plan);
    }
    printf("  most distinct ring peers of a rank: %d\n", worst);
    CHECK(worst <= 4);
}

/* The broadcast tree: every member but the root has a parent that lists it as a child, the
   root reaches everyone within floor(log2 n) hops, nobody talks to more than three. */
static void comm_tree_reaches_every_member(void)
{
    dcp_comm_tree node;
    dcp_error error;
    int32_t n, failures = 0;
    for (n = 1; n <= 200; n++) {
        int32_t root, m, log2n = 0;
        while ((2 << log2n) <= n) log2n++;
        for (root = 0; root < n; root += n / 7 + 1)
            for (m = 0; m < n; m++) {
                int32_t k, hops = 0, at = m;
                CHECK_EQ(dcp_comm_tree_node(n, root, m, &node, NULL), DCP_OK);
                for (k = 0; k < node.num_children; k++) {
                    dcp_comm_tree child;
                    CHECK_EQ(dcp_comm_tree_node(n, root, node.children[k], &child, NULL), DCP_OK);
                    if (child.parent != m || child.depth != node.depth + 1) failures++;
                }
                if ((node.parent < 0) != (m == root) || node.depth > log2n) failures++;
                while (at != root && hops <= n) { /* climbs to the root */
                    CHECK_EQ(dcp_comm_tree_node(n, root, at, &node, NULL), DCP_OK);
                    at = node.parent, hops++;
                }
                if (hops > log2n) failures++;
            }
    }
    CHECK_EQ(failures, 0);
    CHECK_EQ(dcp_comm_tree_node(0, 0, 0, &node, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_tree_node(4, 4, 0, &node, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "root 4");
    CHECK_EQ(dcp_comm_tree_node(4, 0, 0, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------------ groups on one communicator */

/* Any range of the pool is a group, aligned or not, of any size up to max_cp; the rank's index
   in it is its offset. */
static void choose_takes_any_range(void)
{
    dcp_comm_choice c;
    dcp_error error;
    int32_t D = 48, cp, first, rank, failures = 0;
    for (cp = 1; cp <= D; cp++)
        for (first = 0; first + cp <= D; first += 5)
            for (rank = first; rank < first + cp; rank += 3) {
                if (dcp_comm_choose(D, D, rank, first, cp, 0, &c, NULL) != DCP_OK ||
                    c.cp != cp || c.first_rank != first || c.rank_in_group != rank - first ||
                    c.idle)
                    failures++;
            }
    CHECK_EQ(failures, 0);
    CHECK_EQ(dcp_comm_choose(48, 12, 13, 7, 12, 0, &c, &error), DCP_OK); /* unaligned */
    CHECK_EQ(c.rank_in_group, 6);
    CHECK_EQ(dcp_comm_choose(48, 12, 13, 7, 13, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "max_cp 12");
    CHECK_EQ(dcp_comm_choose(48, 48, 47, 40, 9, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "not a range");
}

/* For groups of random plans (every set of CP sizes), dcp_plan_rank_group's choice is the one
   dcp_comm_choose gives for the rank view's group, and dcp_comm_state_apply takes it. */
static void plan_groups_map_to_choices(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED));
    for (w = 0; w < 40; w++) {
        dcp_plan *plan = random_plan(&rng, w < 10 ? 64 : 24, 80);
        int32_t D, k, rank;
        CHECK(plan != NULL);
        if (!plan) continue;
        D = plan->config.ranks;
        for (k = 0; k < plan->num_microbatches; k++)
            for (rank = 0; rank < D; rank++) {
                dcp_rank_group where;
                dcp_rank_view *view = NULL;
                dcp_comm_choice from_view;
                dcp_comm_state state;
                CHECK_EQ(dcp_plan_rank_group(plan, rank, k, &where, NULL), DCP_OK);
                CHECK_EQ(dcp_rank_view_create(plan, rank, k, &view, NULL), DCP_OK);
                if (!view) continue;
                CHECK_EQ(dcp_comm_choose(D, plan->config.max_cp, rank, view->first_rank,
                                         view->cp, view->idle, &from_view, NULL),
                         DCP_OK);
                CHECK(memcmp(&from_view, &where.choice, sizeof from_view) == 0);
                CHECK_EQ(where.local_rows, view->local_tokens);
                CHECK_EQ(where.choice.idle, where.group < 0);
                CHECK_EQ(where.choice.rank_in_group, view->idle ? 0 : view->rank_in_group);
                CHECK_EQ(dcp_comm_state_init(&state, D, rank, plan->config.max_cp, NULL), DCP_OK);
                CHECK_EQ(dcp_comm_state_apply(&state, &where.choice, NULL), DCP_OK);
                CHECK(memcmp(&state.current, &where.choice, sizeof where.choice) == 0);
                dcp_rank_view_destroy(view);
            }
        dcp_plan_destroy(plan);
    }
}

static void choose_rejects_bad_groups(void)
{
    dcp_comm_choice c = {0}; /* zeroed so that inlining never makes gcc see it unset */
    dcp_comm_state state;
    dcp_error error;
    dcp_plan *plan = NULL;
    dcp_rank_group where;
    dcp_config config = make_config(6, 64);
    int64_t lengths[3] = {100, 20, 30};
    CHECK_EQ(dcp_comm_choose(8, 4, 5, 4, 4, 0, &c, &error), DCP_OK);
    CHECK_EQ(c.rank_in_group, 1);
    CHECK_EQ(dcp_comm_choose(8, 4, 5, 2, 4, 0, &c, &error), DCP_OK); /* unaligned is fine */
    CHECK_EQ(dcp_comm_choose(8, 4, 1, 0, 8, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "max_cp 4");
    CHECK_EQ(dcp_comm_choose(8, 4, 1, 4, 4, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_choose(6, 4, 5, 4, 4, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "first_rank 4");
    CHECK_EQ(dcp_comm_choose(8, 4, 1, 0, 2, 1, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "idle");
    CHECK_EQ(dcp_comm_choose(8, 3, 1, 0, 3, 0, &c, &error), DCP_OK); /* any max_cp */
    CHECK_EQ(dcp_comm_choose(8, 0, 1, 1, 1, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_choose(8, 16, 1, 1, 1, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "got 16");
    CHECK_EQ(dcp_comm_choose(8, 4, 1, 1, 0, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    /* static CP 4 on 6 ranks: ranks 4 and 5 are past the last full block and sit out */
    CHECK_EQ(dcp_comm_choose_static(6, 4, 5, 4, &c, &error), DCP_OK);
    CHECK_EQ(c.idle, 1);
    CHECK_EQ(c.cp, 1);
    CHECK_EQ(dcp_comm_choose_static(6, 4, 3, 4, &c, &error), DCP_OK);
    CHECK_EQ(c.idle, 0);
    CHECK_EQ(c.first_rank, 0);
    CHECK_EQ(c.rank_in_group, 3);
    CHECK_EQ(dcp_comm_choose_static(6, 6, 4, 3, &c, &error), DCP_OK); /* blocks of 3 */
    CHECK_EQ(c.first_rank, 3);
    CHECK_EQ(c.rank_in_group, 1);
    /* a choice applied as it is: checked against the state in O(1) */
    CHECK_EQ(dcp_comm_state_init(&state, 6, 4, 6, NULL), DCP_OK);
    CHECK_EQ(dcp_comm_state_apply(&state, &c, &error), DCP_OK);
    c.rank_in_group = 0;
    CHECK_EQ(dcp_comm_state_apply(&state, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rank_in_group 0");
    c.rank_in_group = 1, c.first_rank = 4;
    CHECK_EQ(dcp_comm_state_apply(&state, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_state_apply(&state, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(state.current.first_rank, 3); /* unchanged by the refusals */
    CHECK_EQ(dcp_plan_create(&config, lengths, 3, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_rank_group(plan, 6, 0, &where, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_plan_rank_group(plan, 0, plan ? plan->num_microbatches : 0, &where, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_plan_rank_group(plan, 0, 0, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    dcp_plan_destroy(plan);
}

/* ------------------------------------------------------------- switch and eval override */

static void state_is(const dcp_comm_state *s, int32_t cp, int32_t first_rank, int32_t override_cp,
                     int32_t depth)
{
    CHECK_EQ(s->current.cp, cp);
    CHECK_EQ(s->current.first_rank, first_rank);
    CHECK_EQ(s->current.rank_in_group, s->rank - first_rank);
    CHECK_EQ(s->override_cp, override_cp);
    CHECK_EQ(s->depth, depth);
}

/* Seed 003: train with CP 1, evaluate with CP 4 on the same ranks, train again with CP 1. */
static void eval_override_train_cp1_eval_cp4(void)
{
    dcp_comm_state s;
    dcp_comm_scope scope;
    dcp_comm_choice c;
    dcp_error error;
    memset(&scope, 0, sizeof scope);
    CHECK_EQ(dcp_comm_state_init(&s, 8, 6, 8, &error), DCP_OK);
    state_is(&s, 1, 6, 0, 0);
    CHECK_EQ(dcp_comm_state_switch(&s, 6, 1, 0, &c, &error), DCP_OK); /* a training microbatch */
    CHECK_EQ(c.cp, 1);
    CHECK_EQ(dcp_comm_override_begin(&s, 4, &scope, &error), DCP_OK);
    state_is(&s, 4, 4, 4, 1);
    CHECK_EQ(s.current.rank_in_group, 2);
    /* an eval plan at CP 4 (and idle ranks) is accepted; a group of another size is not */
    CHECK_EQ(dcp_comm_state_switch(&s, 4, 4, 0, &c, &error), DCP_OK);
    CHECK_EQ(dcp_comm_state_switch(&s, 6, 2, 0, &c, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "override pins cp 4");
    state_is(&s, 4, 4, 4, 1); /* unchanged by the refused switch */
    CHECK_EQ(dcp_comm_state_switch(&s, 6, 1, 1, &c, &error), DCP_OK);
    CHECK_EQ(c.idle, 1);
    CHECK_EQ(dcp_comm_override_end(&s, &scope, &error), DCP_OK);
    state_is(&s, 1, 6, 0, 0); /* back to training */
    CHECK_EQ(scope.depth, 0);
    CHECK_EQ(dcp_comm_override_end(&s, &scope, &error), DCP_ERROR_INVALID_ARGUMENT); /* twice */
    CHECK_CONTAINS(error.message, "not open");
    state_is(&s, 1, 6, 0, 0);
    /* a failed begin changes nothing */
    CHECK_EQ(dcp_comm_override_begin(&s, 16, &scope, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_override_begin(&s, 0, &scope, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(scope.depth, 0);
    state_is(&s, 1, 6, 0, 0);
    /* any size: at cp 3, rank 6 of 8 is past the last full block [3, 6) and sits out */
    CHECK_EQ(dcp_comm_override_begin(&s, 3, &scope, &error), DCP_OK);
    CHECK_EQ(s.current.idle, 1);
    CHECK_EQ(dcp_comm_state_switch(&s, 5, 3, 0, &c, &error), DCP_OK); /* an unaligned group */
    CHECK_EQ(c.rank_in_group, 1);
    CHECK_EQ(dcp_comm_override_end(&s, &scope, &error), DCP_OK);
    state_is(&s, 1, 6, 0, 0);
}

static void eval_overrides_nest_and_unwind(void)
{
    dcp_comm_state s;
    dcp_comm_scope outer, inner, again;
    dcp_error error;
    memset(&outer, 0, sizeof outer);
    memset(&inner, 0, sizeof inner);
    memset(&again, 0, sizeof again);
    CHECK_EQ(dcp_comm_state_init(&s, 6, 5, 4, &error), DCP_OK);
    CHECK_EQ(dcp_comm_state_switch(&s, 4, 2, 0, NULL, &error), DCP_OK);
    state_is(&s, 2, 4, 0, 0);
    CHECK_EQ(dcp_comm_override_begin(&s, 2, &outer, &error), DCP_OK);
    CHECK_EQ(dcp_comm_override_begin(&s, 2, &outer, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_override_begin(&s, 4, &inner, &error), DCP_OK);
    CHECK_EQ(s.current.idle, 1); /* rank 5 of 6 is outside every full block of 4 */
    CHECK_EQ(s.current.cp, 1);
    CHECK_EQ(s.depth, 2);
    CHECK_EQ(dcp_comm_override_end(&s, &inner, &error), DCP_OK);
    state_is(&s, 2, 4, 2, 1);
    CHECK_EQ(dcp_comm_override_end(&s, &outer, &error), DCP_OK);
    state_is(&s, 2, 4, 0, 0);
    /* ending the outer scope first unwinds the inner one too, restores, and says so */
    CHECK_EQ(dcp_comm_override_begin(&s, 2, &outer, &error), DCP_OK);
    CHECK_EQ(dcp_comm_override_begin(&s, 1, &inner, &error), DCP_OK);
    CHECK_EQ(dcp_comm_override_end(&s, &outer, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "closed too");
    state_is(&s, 2, 4, 0, 0);
    CHECK_EQ(dcp_comm_override_end(&s, &inner, &error), DCP_ERROR_INVALID_ARGUMENT);
    state_is(&s, 2, 4, 0, 0);
    /* a stale scope cannot end a newer one */
    CHECK_EQ(dcp_comm_override_begin(&s, 4, &again, &error), DCP_OK);
    CHECK_EQ(dcp_comm_override_end(&s, &inner, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(s.depth, 1);
    CHECK_EQ(dcp_comm_override_end(&s, &again, &error), DCP_OK);
    state_is(&s, 2, 4, 0, 0);
}

typedef struct scoped_probe {
    int32_t seen_cp, seen_override, calls;
    dcp_status result;
} scoped_probe;

static dcp_status scoped_body(dcp_comm_state *state, void *user, dcp_error *error)
{
    scoped_probe *probe = (scoped_probe *)user;
    probe->calls++;
    probe->seen_cp = state->current.cp;
    probe->seen_override = state->override_cp;
    /* the body may switch to groups of the pinned size */
    if (dcp_comm_state_switch(state, 0, 4, 0, NULL, error) != DCP_OK) return error->status;
    if (probe->result != DCP_OK) {
        snprintf(error->message, sizeof error->message, "evaluation failed");
        error->status = probe->result;
    }
    return probe->result;
}

/* The callback form restores the state whatever the body returns. */
static void eval_override_run_restores_on_error(void)
{
    dcp_comm_state s;
    scoped_probe probe;
    dcp_error error;
    memset(&probe, 0, sizeof probe);
    CHECK_EQ(dcp_comm_state_init(&s, 8, 2, 8, &error), DCP_OK);
    CHECK_EQ(dcp_comm_override_run(&s, 4, scoped_body, &probe, &error), DCP_OK);
    CHECK_EQ(probe.calls, 1);
    CHECK_EQ(probe.seen_cp, 4);
    CHECK_EQ(probe.seen_override, 4);
    state_is(&s, 1, 2, 0, 0);
    probe.result = DCP_ERROR_NCCL;
    CHECK_EQ(dcp_comm_override_run(&s, 4, scoped_body, &probe, &error), DCP_ERROR_NCCL);
    CHECK_CONTAINS(error.message, "evaluation failed"); /* the body's own message */
    CHECK_EQ(probe.calls, 2);
    state_is(&s, 1, 2, 0, 0);
    CHECK_EQ(dcp_comm_override_run(&s, 16, scoped_body, &probe, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(probe.calls, 2); /* a failed begin never runs the body */
    CHECK_EQ(dcp_comm_override_run(&s, 4, NULL, &probe, &error), DCP_ERROR_INVALID_ARGUMENT);
    state_is(&s, 1, 2, 0, 0);
}

/* ------------------------------------------------------------------------ reroute */

/* The value of token `position` of sample s in a record of `bytes` bytes (never zero). */
static void token_record(int32_t s, int64_t position, size_t bytes, unsigned char *out)
{
    uint64_t x = ((uint64_t)(uint32_t)s << 32) ^ (uint64_t)position ^ UINT64_C(0x9E3779B97F4A7C15);
    size_t i;
    for (i = 0; i < bytes; i++) {
        x = x * UINT64_C(6364136223846793005) + 1442695040888963407u;
        out[i] = (unsigned char)(x >> 56) | 1;
    }
}

/* One rank's operations with a non-zero byte count, in list order. */
typedef struct op_list {
    int32_t count;
    dcp_reroute_op *ops;
} op_list;

static op_list ops_of(const dcp_reroute *list, size_t element_size)
{
    op_list out;
    int32_t i;
    out.count = 0;
    out.ops = (dcp_reroute_op *)malloc(((size_t)list->count + 1) * sizeof(dcp_reroute_op));
    for (i = 0; i < list->count; i++) {
        dcp_reroute_op op;
        CHECK_EQ(dcp_reroute_op_get(list, i, element_size, &op, NULL), DCP_OK);
        if (op.bytes == 0) continue; /* skipped on both sides */
        out.ops[out.count++] = op;
    }
    return out;
}

/* Executes every rank's operations as NCCL would: the k-th send of A to B lands in the
   buffer of the k-th receive of B from A, matched by order alone; sizes must agree. Local
   copies with memcpy; destinations zeroed first (the executor's memset). Then every buffer
   must equal packing the rank's view directly. */
static void execute_as_nccl(const dcp_plan *plan, const int32_t *holders, size_t bytes)
{
    int32_t D = plan->config.ranks, K = plan->num_microbatches, a, b, k, s;
    dcp_reroute **lists = (dcp_reroute **)calloc((size_t)D, sizeof *lists);
    op_list *ops = (op_list *)calloc((size_t)D, sizeof *ops);
    unsigned char **samples = (unsigned char **)calloc((size_t)plan->num_samples, sizeof(void *));
    unsigned char **local = (unsigned char **)calloc((size_t)D * (size_t)K, sizeof(void *));
    int64_t *rows = (int64_t *)calloc((size_t)D * (size_t)K, sizeof(int64_t));
    for (s = 0; s < plan->num_samples; s++) {
        int64_t p;
        samples[s] = (unsigned char *)malloc((size_t)plan->sample_lengths[s] * bytes);
        for (p = 0; p < plan->sample_lengths[s]; p++)
            token_record(s, p, bytes, samples[s] + (size_t)p * bytes);
    }
    for (a = 0; a < D; a++) {
        for (k = 0; k < K; k++) {
            dcp_rank_group where;
            size_t cell = (size_t)a * (size_t)K + (size_t)k;
            CHECK_EQ(dcp_plan_rank_group(plan, a, k, &where, NULL), DCP_OK);
            rows[cell] = where.local_rows;
            local[cell] = (unsigned char *)malloc((size_t)rows[cell] * bytes + 1);
            memset(local[cell], 0xAB, (size_t)rows[cell] * bytes);
            memset(local[cell], 0, (size_t)rows[cell] * bytes); /* the executor zero-fills */
        }
        CHECK_EQ(dcp_reroute_create(plan, holders, a, &lists[a], NULL), DCP_OK);
        CHECK_EQ(dcp_reroute_check(lists[a], plan->num_samples, plan->sample_lengths, K,
                                   rows + (size_t)a * (size_t)K, NULL),
                 DCP_OK);
        ops[a] = ops_of(lists[a], bytes);
    }
    for (a = 0; a < D; a++)
        for (b = 0; b < D; b++) {
            int32_t i = 0, j = 0;
            if (a == b) continue;
            for (;;) {
                const dcp_reroute_op *send, *recv;
                while (i < ops[a].count &&
                       !(ops[a].ops[i].kind == DCP_TRANSFER_SEND && ops[a].ops[i].peer == b))
                    i++;
                while (j < ops[b].count &&
                       !(ops[b].ops[j].kind == DCP_TRANSFER_RECV && ops[b].ops[j].peer == a))
                    j++;
                if (i == ops[a].count || j == ops[b].count) break;
                send = &ops[a].ops[i++];
                recv = &ops[b].ops[j++];
                CHECK_EQ(send->bytes, recv->bytes);
                if (send->bytes != recv->bytes) continue;
                memcpy(local[(size_t)b * (size_t)K + (size_t)recv->microbatch] +
                           recv->destination_offset,
                       samples[send->sample] + send->source_offset, send->bytes);
            }
            CHECK(i == ops[a].count && j == ops[b].count); /* nothing left unmatched */
        }
    for (a = 0; a < D; a++) {
        int32_t i;
        for (i = 0; i < ops[a].count; i++) {
            const dcp_reroute_op *op = &ops[a].ops[i];
            if (op->kind != DCP_TRANSFER_COPY) continue;
            CHECK_EQ(holders[op->sample], a);
            memcpy(local[(size_t)a * (size_t)K + (size_t)op->microbatch] + op->destination_offset,
                   samples[op->sample] + op->source_offset, op->bytes);
        }
    }
    for (a = 0; a < D; a++)
        for (k = 0; k < K; k++) {
            size_t cell = (size_t)a * (size_t)K + (size_t)k;
            dcp_rank_view *view = NULL;
            unsigned char *direct = (unsigned char *)malloc((size_t)rows[cell] * bytes + 1);
            CHECK_EQ(dcp_rank_view_create(plan, a, k, &view, NULL), DCP_OK);
            CHECK_EQ(dcp_rank_view_pack(view, (const void *const *)samples, bytes, direct, NULL),
                     DCP_OK);
            CHECK(memcmp(direct, local[cell], (size_t)rows[cell] * bytes) == 0);
            dcp_rank_view_destroy(view);
            free(direct);
        }
    for (a = 0; a < D; a++) {
        dcp_reroute_destroy(lists[a]);
        free(ops[a].ops);
        for (k = 0; k < K; k++) free(local[(size_t)a * (size_t)K + (size_t)k]);
    }
    for (s = 0; s < plan->num_samples; s++) free(samples[s]);
    free(lists);
    free(ops);
    free(samples);
    free(local);
    free(rows);
}

static void reroute_ops_pair_like_nccl(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED) + 1);
    for (w = 0; w < 40; w++) {
        dcp_plan *plan = random_plan(&rng, w < 8 ? 48 : 16, w < 8 ? 120 : 40);
        int32_t *holders, s;
        CHECK(plan != NULL);
        if (!plan) continue;
        holders = (int32_t *)malloc((size_t)plan->num_samples * sizeof(int32_t));
        for (s = 0; s < plan->num_samples; s++)
            holders[s] = (int32_t)dcp_rng_below(&rng, (uint64_t)plan->config.ranks);
        execute_as_nccl(plan, holders, 1 + (size_t)dcp_rng_below(&rng, 7));
        free(holders);
        dcp_plan_destroy(plan);
    }
}

static void reroute_ops_reject_bad_input(void)
{
    dcp_transfer transfers[2];
    dcp_reroute list;
    dcp_reroute_op op;
    dcp_error error;
    int64_t sample_rows[2] = {10, 10}, microbatch_rows[1] = {8}, written[1] = {-1};
    memset(&list, 0, sizeof list);
    memset(transfers, 0, sizeof transfers);
    list.count = 2;
    list.transfers = transfers;
    transfers[0].kind = DCP_TRANSFER_SEND;
    transfers[0].peer = 1;
    transfers[0].sample = 1;
    transfers[0].source_begin = 2;
    transfers[0].source_end = 6;
    transfers[1].kind = DCP_TRANSFER_RECV;
    transfers[1].sample = 0;
    transfers[1].source_begin = 0;
    transfers[1].source_end = 4;
    transfers[1].destination_row = 3;
    CHECK_EQ(dcp_reroute_op_get(&list, 0, 12, &op, &error), DCP_OK);
    CHECK_EQ(op.source_offset, 24);
    CHECK_EQ(op.bytes, 48);
    CHECK_EQ(dcp_reroute_op_get(&list, 1, 2, &op, &error), DCP_OK);
    CHECK_EQ(op.destination_offset, 6);
    CHECK_EQ(dcp_reroute_op_get(&list, 2, 2, &op, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_reroute_op_get(&list, 0, 0, &op, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_reroute_op_get(&list, 0, SIZE_MAX / 2, &op, &error), DCP_ERROR_OVERFLOW);
    CHECK_EQ(dcp_reroute_check(&list, 2, sample_rows, 1, microbatch_rows, &error), DCP_OK);
    CHECK_EQ(dcp_reroute_rows_written(&list, 1, written, &error), DCP_OK);
    CHECK_EQ(written[0], 7); /* the receive writes rows 3..6; the send writes nothing here */
    CHECK_EQ(dcp_reroute_rows_written(&list, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "rows");
    CHECK_EQ(dcp_reroute_rows_written(&list, 0, written, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "microbatch 0");
    microbatch_rows[0] = 6; /* rows 3..7 no longer fit */
    CHECK_EQ(dcp_reroute_check(&list, 2, sample_rows, 1, microbatch_rows, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "microbatch 0, which has 6 rows");
    CHECK_EQ(dcp_reroute_check(&list, 1, NULL, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "sample 1");
    sample_rows[1] = 5;
    CHECK_EQ(dcp_reroute_check(&list, 2, sample_rows, 1, NULL, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    transfers[1].microbatch = 1;
    CHECK_EQ(dcp_reroute_check(&list, 2, NULL, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "microbatch 1");
    transfers[1].microbatch = 0;
    transfers[1].source_end = -1;
    CHECK_EQ(dcp_reroute_check(&list, 2, NULL, 1, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_reroute_op_get(&list, 1, 2, &op, &error), DCP_ERROR_INVALID_ARGUMENT);
}

/* The bound on a microbatch buffer, on both sides, for every rank of random plans: a buffer
   of exactly the rows the list writes is accepted, one row less is refused (naming the
   microbatch), and what is written never exceeds the plan's local rows. dcp_nccl.h runs this
   check before it enqueues anything. */
static void reroute_buffer_bound_both_sides(void)
{
    dcp_rng rng;
    int w;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED) + 3);
    for (w = 0; w < 30; w++) {
        dcp_plan *plan = random_plan(&rng, 16, 40);
        int32_t *holders, s, a, k, K;
        int64_t *written, *rows;
        CHECK(plan != NULL);
        if (!plan) continue;
        K = plan->num_microbatches;
        holders = (int32_t *)malloc((size_t)plan->num_samples * sizeof(int32_t));
        written = (int64_t *)malloc(((size_t)K + 1) * sizeof(int64_t));
        rows = (int64_t *)malloc(((size_t)K + 1) * sizeof(int64_t));
        for (s = 0; s < plan->num_samples; s++)
            holders[s] = (int32_t)dcp_rng_below(&rng, (uint64_t)plan->config.ranks);
        for (a = 0; a < plan->config.ranks; a++) {
            dcp_reroute *list = NULL;
            dcp_error error;
            CHECK_EQ(dcp_reroute_create(plan, holders, a, &list, NULL), DCP_OK);
            if (!list) continue;
            CHECK_EQ(dcp_reroute_rows_written(list, K, written, &error), DCP_OK);
            for (k = 0; k < K; k++) {
                dcp_rank_group where;
                CHECK_EQ(dcp_plan_rank_group(plan, a, k, &where, NULL), DCP_OK);
                CHECK(written[k] >= 0 && written[k] <= where.local_rows);
                rows[k] = written[k];
            }
            CHECK_EQ(dcp_reroute_check(list, plan->num_samples, plan->sample_lengths, K, rows,
                                       &error),
                     DCP_OK);
            for (k = 0; k < K; k++) {
                char needle[96];
                if (written[k] == 0) continue;
                rows[k] = written[k] - 1;
                CHECK_EQ(dcp_reroute_check(list, plan->num_samples, plan->sample_lengths, K, rows,
                                           &error),
                         DCP_ERROR_INVALID_ARGUMENT);
                snprintf(needle, sizeof needle, "of microbatch %d, which has %lld rows", (int)k,
                         (long long)rows[k]);
                CHECK_CONTAINS(error.message, needle);
                rows[k] = written[k];
            }
            dcp_reroute_destroy(list);
        }
        free(holders), free(written), free(rows);
        dcp_plan_destroy(plan);
    }
}

/* --------------------------------------------------------------------------- ring */

/* Message passing on cp ranks (every size to 20, and larger ones, powers of two or not): every
   step reads the KV dcp_ring_step_plan names, every rank sees every KV exactly once, sends
   meet receives, no step receives into a slot it reads or sends, and every rank's dK, dV come
   home having collected each rank's contribution once. */
static void ring_exchange_by_message_passing(void)
{
    static const int32_t larger[] = {24, 48, 100, 127, 128, 1000, 1024};
    int32_t size;
    for (size = 0; size < 20 + TEST_COUNT(larger); size++)
        for (int32_t causal = 0; causal <= 1; causal++) {
            const int32_t cp = size < 20 ? size + 1 : larger[size - 20];
            /* per rank: the KV source in each slot, the accumulator (source, contributions) */
            int32_t *kv = (int32_t *)malloc((size_t)cp * 2 * sizeof(int32_t));
            int32_t *acc_source = (int32_t *)malloc((size_t)cp * 2 * sizeof(int32_t));
            int32_t *acc_count = (int32_t *)calloc((size_t)cp * 2, sizeof(int32_t));
            int32_t *kv_out = (int32_t *)malloc((size_t)cp * sizeof(int32_t));
            int32_t *acc_out_source = (int32_t *)malloc((size_t)cp * sizeof(int32_t));
            int32_t *acc_out_count = (int32_t *)malloc((size_t)cp * sizeof(int32_t));
            unsigned char *seen = (unsigned char *)calloc((size_t)cp * (size_t)cp, 1);
            unsigned char *added = (unsigned char *)calloc((size_t)cp * (size_t)cp, 1);
            int32_t r, s, failures = 0;
            for (r = 0; r < 2 * cp; r++) kv[r] = acc_source[r] = -1;
            for (s = 0; s < cp && failures == 0; s++) {
                for (r = 0; r < cp; r++) { /* compute, then what leaves this rank */
                    dcp_ring_exchange x;
                    dcp_ring_step step;
                    int32_t source, slot, position = -1, next = -1, prev = -1;
                    CHECK_EQ(dcp_ring_exchange_plan(cp, r, s, &x, NULL), DCP_OK);
                    CHECK_EQ(dcp_ring_step_plan(cp, r, s, causal, &step, NULL), DCP_OK);
                    CHECK_EQ(x.kv_source, step.view.kv_rank);
                    CHECK_EQ(dcp_ring_position(cp, r, &position, NULL), DCP_OK);
                    CHECK_EQ(dcp_ring_order(cp, (position + 1) % cp, &next, NULL), DCP_OK);
                    CHECK_EQ(dcp_ring_order(cp, (position + cp - 1) % cp, &prev, NULL), DCP_OK);
                    CHECK_EQ(x.next, next);
                    CHECK_EQ(x.prev, prev);
                    source = x.kv_slot < 0 ? r : kv[2 * r + x.kv_slot];
                    CHECK_EQ(source, x.kv_source);
                    if (source < 0 || source >= cp || seen[(size_t)r * cp + source]) failures++;
                    else seen[(size_t)r * cp + source] = 1;
                    CHECK(x.kv_recv_slot < 0 || x.kv_recv_slot != x.kv_slot);
                    CHECK(x.dkv_recv_slot < 0 || x.dkv_recv_slot != x.dkv_slot);
                    CHECK_EQ(x.kv_send, s < cp - 1);
                    CHECK_EQ(x.kv_recv_slot >= 0, s < cp - 1);
                    slot = 2 * r + x.dkv_slot;
                    if (x.dkv_zero) {
                        acc_source[slot] = r;
                        acc_count[slot] = 0;
                    }
                    CHECK_EQ(acc_source[slot], x.kv_source); /* dK, dV travel with their KV */
                    if (acc_source[slot] >= 0 && acc_source[slot] < cp) {
                        size_t cell = (size_t)acc_source[slot] * cp + (size_t)r;
                        if (added[cell]) failures++;
                        added[cell] = 1;
                    }
                    acc_count[slot]++;
                    kv_out[r] = x.kv_send ? source : -1;
                    acc_out_source[r] = x.dkv_send ? acc_source[slot] : -1;
                    acc_out_count[r] = acc_count[slot];
                }
                for (r = 0; r < cp; r++) { /* what arrives, from prev */
                    dcp_ring_exchange x;
                    int32_t prev;
                    CHECK_EQ(dcp_ring_exchange_plan(cp, r, s, &x, NULL), DCP_OK);
                    prev = x.prev;
                    if (x.kv_recv_slot >= 0) {
                        CHECK(kv_out[prev] >= 0);
                        CHECK_EQ(kv_out[prev], x.kv_recv_source);
                        kv[2 * r + x.kv_recv_slot] = kv_out[prev];
                    } else
                        CHECK_EQ(kv_out[prev], -1);
                    if (x.dkv_recv_slot >= 0) {
                        CHECK_EQ(acc_out_source[prev], x.dkv_recv_source);
                        acc_source[2 * r + x.dkv_recv_slot] = acc_out_source[prev];
                        acc_count[2 * r + x.dkv_recv_slot] = acc_out_count[prev];
                    }
                    if (s == cp - 1) { /* home: the own accumulator, complete */
                        CHECK(x.dkv_home_slot >= 0);
                        if (x.dkv_home_slot < 0) continue;
                        CHECK_EQ(acc_source[2 * r + x.dkv_home_slot], r);
                        CHECK_EQ(acc_count[2 * r + x.dkv_home_slot], cp);
                    } else
                        CHECK_EQ(x.dkv_home_slot, -1);
                }
            }
            CHECK_EQ(failures, 0);
            for (r = 0; r < cp * cp; r++) {
                if (!seen[r] || !added[r]) failures++;
            }
            CHECK_EQ(failures, 0); /* every (rank, source) pair exactly once, both passes */
            free(kv);
            free(acc_source);
            free(acc_count);
            free(kv_out);
            free(acc_out_source);
            free(acc_out_count);
            free(seen);
            free(added);
        }
}

static void ring_exchange_rejects_bad_input(void)
{
    dcp_ring_exchange x;
    dcp_error error;
    CHECK_EQ(dcp_ring_exchange_plan(0, 0, 0, &x, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "got 0");
    CHECK_EQ(dcp_ring_exchange_plan(DCP_MAX_RANKS + 1, 0, 0, &x, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_exchange_plan(3, 1, 2, &x, &error), DCP_OK); /* 0 2 1: any size */
    CHECK_EQ(x.next, 0);
    CHECK_EQ(x.prev, 2);
    CHECK_EQ(dcp_ring_exchange_plan(4, 4, 0, &x, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_exchange_plan(4, 0, 4, &x, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "step");
    CHECK_EQ(dcp_ring_exchange_plan(4, 0, -1, &x, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_exchange_plan(4, 0, 0, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_ring_exchange_plan(1, 0, 0, &x, &error), DCP_OK);
    CHECK_EQ(x.kv_slot, -1);
    CHECK_EQ(x.kv_send, 0);
    CHECK_EQ(x.dkv_send, 0);
    CHECK_EQ(x.dkv_home_slot, x.dkv_slot);
}

/* A THD pack of random sequences for a ring of cp ranks, with its local buffers per rank. */
#define RING_MAX_SEQ 6
#define RING_MAX_CP 12
typedef struct ring_case {
    dcp_attention_params params;
    int32_t cp, n;
    int32_t cu[RING_MAX_SEQ + 1], cu_padded[RING_MAX_SEQ + 1];
    dcp_thd_layout layout;
    int64_t rows, q_values, kv_values, lse_values;
    float *q[RING_MAX_CP], *k[RING_MAX_CP], *v[RING_MAX_CP], *dout[RING_MAX_CP];
} ring_case;

static float *random_buffer(dcp_rng *rng, int64_t count)
{
    float *p = (float *)malloc((size_t)count * sizeof(float) + 1);
    int64_t i;
    for (i = 0; i < count; i++) p[i] = (float)(2.0 * dcp_rng_uniform(rng) - 1.0);
    return p;
}

/* The layout points into the case: build it in place. */
static void ring_case_make(ring_case *out, dcp_rng *rng, int32_t cp, int32_t causal,
                           int32_t heads, int32_t kv_heads)
{
    ring_case c;
    int32_t i, r, unit = cp > 1 ? 2 * cp : 1;
    memset(&c, 0, sizeof c);
    c.cp = cp;
    c.n = 1 + (int32_t)dcp_rng_below(rng, RING_MAX_SEQ);
    for (i = 0; i < c.n; i++) {
        int32_t length = 1 + (int32_t)dcp_rng_below(rng, 40);
        int32_t padded = (length + unit - 1) / unit * unit + (int32_t)dcp_rng_below(rng, 2) * unit;
        c.cu[i + 1] = c.cu[i] + length;
        c.cu_padded[i + 1] = c.cu_padded[i] + padded;
    }
    c.layout.num_sequences = c.n;
    c.layout.cu_seqlens = c.cu;
    c.layout.cu_seqlens_padded = c.cu_padded;
    c.layout.cp = cp;
    c.params.num_heads = heads;
    c.params.num_kv_heads = kv_heads;
    c.params.head_dim = 8;
    c.params.causal = causal;
    c.rows = c.cu_padded[c.n] / cp;
    c.lse_values = c.rows * heads;
    c.q_values = c.lse_values * c.params.head_dim;
    c.kv_values = c.rows * kv_heads * c.params.head_dim;
    for (r = 0; r < cp; r++) {
        c.q[r] = random_buffer(rng, c.q_values);
        c.k[r] = random_buffer(rng, c.kv_values);
        c.v[r] = random_buffer(rng, c.kv_values);
        c.dout[r] = random_buffer(rng, c.q_values);
    }
    *out = c;
    out->layout.cu_seqlens = out->cu;
    out->layout.cu_seqlens_padded = out->cu_padded;
}

static void ring_case_free(ring_case *c)
{
    int32_t r;
    for (r = 0; r < c->cp; r++) {
        free(c->q[r]);
        free(c->k[r]);
        free(c->v[r]);
        free(c->dout[r]);
    }
}

static float *floats(int64_t count) { return (float *)calloc((size_t)count + 1, sizeof(float)); }

/* Per rank: two KV slots (k then v) and two dK/dV accumulators, as the NCCL driver holds them
   in its scratch; the transfers of a step land before its computation (the worst case of an
   asynchronous receive), so a receive into a slot being read would corrupt the result. */
typedef struct ring_ranks {
    float *kv[RING_MAX_CP][2], *dkv[RING_MAX_CP][2], *sent[RING_MAX_CP];
} ring_ranks;

static void ring_ranks_make(ring_ranks *rr, const ring_case *c)
{
    int32_t r, i;
    for (r = 0; r < c->cp; r++) {
        for (i = 0; i < 2; i++) {
            rr->kv[r][i] = floats(2 * c->kv_values);
            rr->dkv[r][i] = floats(2 * c->kv_values);
        }
        rr->sent[r] = floats(2 * c->kv_values);
    }
}

static void ring_ranks_free(ring_ranks *rr, const ring_case *c)
{
    int32_t r, i;
    for (r = 0; r < c->cp; r++) {
        for (i = 0; i < 2; i++) {
            free(rr->kv[r][i]);
            free(rr->dkv[r][i]);
        }
        free(rr->sent[r]);
    }
}

/* The k and v a step of rank r reads. */
static void step_kv(const ring_case *c, ring_ranks *rr, int32_t r, const dcp_ring_exchange *x,
                    const float **k, const float **v)
{
    *k = x->kv_slot < 0 ? c->k[r] : rr->kv[r][x->kv_slot];
    *v = x->kv_slot < 0 ? c->v[r] : rr->kv[r][x->kv_slot] + c->kv_values;
}

/* Posts step s's KV transfers: every sender's KV is captured, then lands in the receivers. */
static void deliver_kv(const ring_case *c, ring_ranks *rr, int32_t s)
{
    const size_t half = (size_t)c->kv_values * sizeof(float);
    int32_t r;
    for (r = 0; r < c->cp; r++) {
        dcp_ring_exchange x;
        const float *k, *v;
        CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
        if (!x.kv_send) continue;
        step_kv(c, rr, r, &x, &k, &v);
        memcpy(rr->sent[r], k, half);
        memcpy(rr->sent[r] + c->kv_values, v, half);
    }
    for (r = 0; r < c->cp; r++) {
        dcp_ring_exchange x;
        CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
        if (x.kv_recv_slot >= 0) memcpy(rr->kv[r][x.kv_recv_slot], rr->sent[x.prev], 2 * half);
    }
}

static void ring_driver_forward(const ring_case *c, float **out, float **lse)
{
    ring_ranks rr;
    float *partial = floats(c->q_values), *partial_lse = floats(c->lse_values);
    int32_t r, s;
    ring_ranks_make(&rr, c);
    for (r = 0; r < c->cp; r++)
        CHECK_EQ(dcp_attention_acc_init(&c->params, &c->layout, out[r], lse[r], NULL), DCP_OK);
    for (s = 0; s < c->cp; s++) {
        deliver_kv(c, &rr, s);
        for (r = 0; r < c->cp; r++) {
            dcp_ring_exchange x;
            dcp_ring_step step;
            dcp_attention_params p = c->params;
            const float *k, *v;
            CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
            CHECK_EQ(dcp_ring_step_plan(c->cp, r, s, c->params.causal, &step, NULL), DCP_OK);
            step_kv(c, &rr, r, &x, &k, &v);
            p.causal = step.causal;
            CHECK_EQ(dcp_attention_forward(&p, &c->layout, &step.view, c->q[r], k, v, partial,
                                           partial_lse, NULL),
                     DCP_OK);
            CHECK_EQ(dcp_attention_acc_merge(&c->params, &c->layout, step.view.q_half, partial,
                                             partial_lse, out[r], lse[r], NULL),
                     DCP_OK);
        }
    }
    for (r = 0; r < c->cp; r++)
        CHECK_EQ(dcp_attention_acc_finalize(&c->params, &c->layout, r, out[r], lse[r], out[r],
                                            lse[r], NULL),
                 DCP_OK);
    ring_ranks_free(&rr, c);
    free(partial);
    free(partial_lse);
}

static void ring_driver_backward(const ring_case *c, float *const *out, float *const *lse,
                                 float **dq, float **dk, float **dv)
{
    const size_t pair = 2 * (size_t)c->kv_values * sizeof(float);
    ring_ranks rr;
    int32_t r, s;
    ring_ranks_make(&rr, c);
    for (r = 0; r < c->cp; r++) memset(dq[r], 0, (size_t)c->q_values * sizeof(float));
    for (s = 0; s < c->cp; s++) {
        deliver_kv(c, &rr, s);
        for (r = 0; r < c->cp; r++) {
            dcp_ring_exchange x;
            dcp_ring_step step;
            dcp_attention_params p = c->params;
            const float *k, *v;
            float *acc;
            CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
            CHECK_EQ(dcp_ring_step_plan(c->cp, r, s, c->params.causal, &step, NULL), DCP_OK);
            step_kv(c, &rr, r, &x, &k, &v);
            acc = rr.dkv[r][x.dkv_slot];
            if (x.dkv_zero) memset(acc, 0, pair);
            p.causal = step.causal;
            CHECK_EQ(dcp_attention_backward(&p, &c->layout, &step.view, c->q[r], k, v, out[r],
                                            c->dout[r], lse[r], dq[r], acc, acc + c->kv_values,
                                            NULL),
                     DCP_OK);
        }
        for (r = 0; r < c->cp; r++) { /* after the step: accumulators move one hop */
            dcp_ring_exchange x;
            CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
            if (x.dkv_send) memcpy(rr.sent[r], rr.dkv[r][x.dkv_slot], pair);
        }
        for (r = 0; r < c->cp; r++) {
            dcp_ring_exchange x;
            CHECK_EQ(dcp_ring_exchange_plan(c->cp, r, s, &x, NULL), DCP_OK);
            if (x.dkv_recv_slot >= 0) memcpy(rr.dkv[r][x.dkv_recv_slot], rr.sent[x.prev], pair);
            if (x.dkv_home_slot >= 0) {
                memcpy(dk[r], rr.dkv[r][x.dkv_home_slot], pair / 2);
                memcpy(dv[r], rr.dkv[r][x.dkv_home_slot] + c->kv_values, pair / 2);
            }
        }
    }
    ring_ranks_free(&rr, c);
}

static double worst_error(const float *actual, const float *expected, int64_t count)
{
    double worst = 0.0;
    int64_t i;
    for (i = 0; i < count; i++) {
        double scale = fabs(expected[i]) > 1.0 ? fabs(expected[i]) : 1.0;
        double e;
        if (isinf(expected[i]) || isinf(actual[i])) {
            if (actual[i] != expected[i]) return INFINITY;
            continue;
        }
        e = fabs((double)actual[i] - (double)expected[i]) / scale;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* The NCCL driver's sequence of slots, transfers and kernel calls, run with the CPU
   references, gives the reference ring's results: forward bit for bit (same steps, same
   merge order), backward to rounding (dK, dV add up in ring order instead of rank order).
   Sizes that are not powers of two (3, 5, 6, 12) run the same way. */
static void ring_driver_equals_reference_ring(void)
{
    static const int32_t shapes[][3] = {{1, 4, 2}, {2, 2, 2}, {4, 4, 1}, {8, 2, 2}, {2, 4, 4},
                                        {4, 2, 2}, {8, 4, 2}, {1, 2, 1}, {3, 2, 1}, {5, 4, 2},
                                        {6, 2, 2}, {12, 2, 1}};
    dcp_rng rng;
    int32_t i, causal, r;
    dcp_rng_seed(&rng, test_seed_for(SIMULATION_SEED) + 2);
    for (i = 0; i < TEST_COUNT(shapes); i++)
        for (causal = 0; causal <= 1; causal++) {
            ring_case c;
            float *out[RING_MAX_CP], *lse[RING_MAX_CP], *ref_out[RING_MAX_CP];
            float *ref_lse[RING_MAX_CP], *dq[RING_MAX_CP], *dk[RING_MAX_CP], *dv[RING_MAX_CP];
            float *ref_dq[RING_MAX_CP], *ref_dk[RING_MAX_CP], *ref_dv[RING_MAX_CP];
            ring_case_make(&c, &rng, shapes[i][0], causal, shapes[i][1], shapes[i][2]);
            for (r = 0; r < c.cp; r++) {
                out[r] = floats(c.q_values), ref_out[r] = floats(c.q_values);
                lse[r] = floats(c.lse_values), ref_lse[r] = floats(c.lse_values);
                dq[r] = floats(c.q_values), ref_dq[r] = floats(c.q_values);
                dk[r] = floats(c.kv_values), ref_dk[r] = floats(c.kv_values);
                dv[r] = floats(c.kv_values), ref_dv[r] = floats(c.kv_values);
            }
            CHECK_EQ(dcp_ring_attention_forward(&c.params, &c.layout, (const float *const *)c.q,
                                                (const float *const *)c.k,
                                                (const float *const *)c.v, ref_out, ref_lse, NULL,
                                                NULL),
                     DCP_OK);
            ring_driver_forward(&c, out, lse);
            for (r = 0; r < c.cp; r++) {
                CHECK(memcmp(out[r], ref_out[r], (size_t)c.q_values * sizeof(float)) == 0);
                CHECK(memcmp(lse[r], ref_lse[r], (size_t)c.lse_values * sizeof(float)) == 0);
            }
            CHECK_EQ(dcp_ring_attention_backward(
                         &c.params, &c.layout, (const float *const *)c.q,
                         (const float *const *)c.k, (const float *const *)c.v,
                         (const float *const *)ref_out, (const float *const *)c.dout,
                         (const float *const *)ref_lse, ref_dq, ref_dk, ref_dv, NULL),
                     DCP_OK);
            ring_driver_backward(&c, ref_out, ref_lse, dq, dk, dv);
            for (r = 0; r < c.cp; r++) {
                CHECK(worst_error(dq[r], ref_dq[r], c.q_values) <= 1e-5);
                CHECK(worst_error(dk[r], ref_dk[r], c.kv_values) <= 1e-5);
                CHECK(worst_error(dv[r], ref_dv[r], c.kv_values) <= 1e-5);
            }
            for (r = 0; r < c.cp; r++) {
                free(out[r]), free(ref_out[r]), free(lse[r]), free(ref_lse[r]);
                free(dq[r]), free(ref_dq[r]), free(dk[r]), free(ref_dk[r]);
                free(dv[r]), free(ref_dv[r]);
            }
            ring_case_free(&c);
        }
}

static int regions_overlap(const dcp_ring_region *a, const dcp_ring_region *b)
{
    if (a->bytes == 0 || b->bytes == 0) return 0;
    return a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

/* Regions are aligned, disjoint and inside the total, and the exchange plan only names
   slots the layout has. */
static void ring_scratch_layouts(void)
{
    int32_t cp, pass;
    dcp_ring_scratch s;
    dcp_ring_shape shape;
    dcp_error error;
    memset(&shape, 0, sizeof shape);
    shape.local_rows = 1000;
    shape.num_heads = 8;
    shape.num_kv_heads = 2;
    shape.head_dim = 128;
    shape.element_size = 2;
    for (cp = 1; cp <= 64; cp = cp < 8 ? cp + 1 : cp * 2) /* any size */
        for (pass = 0; pass <= 1; pass++) {
            const dcp_ring_region *all[10];
            int32_t i, j, step, kv_slots = 0, dkv_slots = 0;
            shape.cp = cp;
            CHECK_EQ(dcp_ring_scratch_layout(&shape, (dcp_ring_pass)pass, &s, &error), DCP_OK);
            all[0] = &s.kv[0], all[1] = &s.kv[1], all[2] = &s.dkv[0], all[3] = &s.dkv[1];
            all[4] = &s.partial_out, all[5] = &s.partial_lse, all[6] = &s.acc_out;
            all[7] = &s.acc_lse, all[8] = &s.dq, all[9] = &s.dkv_step;
            for (i = 0; i < 10; i++) {
                CHECK_EQ(all[i]->offset % DCP_RING_SCRATCH_ALIGN, 0);
                CHECK(all[i]->offset + all[i]->bytes <= s.total);
                for (j = i + 1; j < 10; j++) CHECK(!regions_overlap(all[i], all[j]));
            }
            kv_slots = (s.kv[0].bytes > 0) + (s.kv[1].bytes > 0);
            dkv_slots = (s.dkv[0].bytes > 0) + (s.dkv[1].bytes > 0);
            if (s.kv[0].bytes) CHECK_EQ(s.kv[0].bytes, 2 * 1000 * 2 * 128 * 2);
            if (pass == DCP_RING_FORWARD) {
                CHECK_EQ(dkv_slots, 0);
                CHECK_EQ(s.dq.bytes, 0);
                CHECK_EQ(s.partial_out.bytes, cp > 1 ? 1000 * 8 * 128 * 4 : 0);
                CHECK_EQ(s.acc_lse.bytes, cp > 1 ? 1000 * 8 * 4 : 0);
                if (cp == 1) CHECK_EQ(s.total, 0);
            } else {
                CHECK_EQ(s.dq.bytes, 1000 * 8 * 128 * 4);
                CHECK_EQ(s.dkv[0].bytes, 2 * 1000 * 2 * 128 * 4);
                CHECK_EQ(s.dkv_step.bytes, cp > 1 ? 2 * 1000 * 2 * 128 * 4 : 0);
                CHECK_EQ(s.partial_out.bytes, 0);
            }
            for (step = 0; step < cp; step++) {
                dcp_ring_exchange x;
                CHECK_EQ(dcp_ring_exchange_plan(cp, cp - 1, step, &x, NULL), DCP_OK);
                CHECK(x.kv_slot < kv_slots && x.kv_recv_slot < kv_slots);
                if (pass == DCP_RING_BACKWARD)
                    CHECK(x.dkv_slot < dkv_slots && x.dkv_recv_slot < dkv_slots &&
                          x.dkv_home_slot < dkv_slots);
            }
        }
    shape.cp = 0;
    CHECK_EQ(dcp_ring_scratch_layout(&shape, DCP_RING_FORWARD, &s, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(error.message, "cp 0");
    shape.cp = 2;
    shape.num_kv_heads = 3;
    CHECK_EQ(dcp_ring_scratch_layout(&shape, DCP_RING_FORWARD, &s, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    shape.num_kv_heads = 2;
    CHECK_EQ(dcp_ring_scratch_layout(&shape, (dcp_ring_pass)2, &s, &error),
             DCP_ERROR_INVALID_ARGUMENT);
    shape.local_rows = INT64_C(1) << 50;
    CHECK_EQ(dcp_ring_scratch_layout(&shape, DCP_RING_BACKWARD, &s, &error), DCP_ERROR_OVERFLOW);
    shape.local_rows = 0; /* an empty group needs nothing but is valid */
    CHECK_EQ(dcp_ring_scratch_layout(&shape, DCP_RING_BACKWARD, &s, &error), DCP_OK);
    CHECK_EQ(s.total, 0);
}

/* ---------------------------------------------------------------- metadata broadcast */

/* The protocol of dcp_nccl.h on simulated ranks: the root's length (one uint64) reaches every
   rank, which checks it and receives the buffer in chunks through a staging buffer of
   chunk_bytes, then validates it with the deserializer. */
static dcp_status broadcast_bytes(const unsigned char *root_data, uint64_t root_length,
                                  size_t chunk_bytes, unsigned char *received, uint64_t capacity,
                                  uint64_t *length, dcp_error *error)
{
    unsigned char staging[64];
    uint64_t wire = root_length, chunks, c;
    dcp_status status;
    *length = wire; /* first collective: the length, on every rank */
    if ((status = dcp_metadata_chunks(wire, chunk_bytes, &chunks, error)) != DCP_OK)
        return status;
    if (wire > capacity)
        return DCP_ERROR_OUT_OF_MEMORY;
    for (c = 0; c < chunks; c++) { /* then one collective per chunk */
        uint64_t begin = c * chunk_bytes;
        size_t n = (size_t)(wire - begin < chunk_bytes ? wire - begin : chunk_bytes);
        memcpy(staging, root_data + begin, n); /* root: host to staging */
        memcpy(received + begin, staging, n);  /* receiver: staging to host */
    }
    return DCP_OK;
}

static void metadata_broadcast_protocol(void)
{
    dcp_config config = make_config(8, 256);
    int64_t lengths[20];
    dcp_plan *plan = NULL, *copy = NULL;
    dcp_rank_view *view = NULL, *view_copy = NULL;
    unsigned char *sent, *received, *again;
    size_t size = 0, again_size = 0, chunk;
    uint64_t length, chunks;
    dcp_error error;
    int32_t i;
    for (i = 0; i < 20; i++) lengths[i] = 10 + 37 * i;
    CHECK_EQ(dcp_plan_create(&config, lengths, 20, &plan, NULL), DCP_OK);
    CHECK_EQ(dcp_plan_serialize(plan, NULL, 0, &size, NULL), DCP_OK);
    sent = (unsigned char *)malloc(size);
    received = (unsigned char *)malloc(size);
    again = (unsigned char *)malloc(size);
    CHECK_EQ(dcp_plan_serialize(plan, sent, size, &size, NULL), DCP_OK);
    for (chunk = 1; chunk <= 64; chunk += 7) {
        memset(received, 0, size);
        CHECK_EQ(broadcast_bytes(sent, size, chunk, received, size, &length, &error), DCP_OK);
        CHECK_EQ(dcp_plan_deserialize(received, (size_t)length, NULL, &copy, &error), DCP_OK);
        CHECK_EQ(dcp_plan_serialize(copy, again, size, &again_size, NULL), DCP_OK);
        CHECK_EQ(again_size, size);
        CHECK(memcmp(again, sent, size) == 0);
        dcp_plan_destroy(copy);
        copy = NULL;
    }
    /* a byte damaged in transit: the receiver refuses it, naming the problem */
    CHECK_EQ(broadcast_bytes(sent, size, 16, received, size, &length, &error), DCP_OK);
    received[size / 2] ^= 0x40;
    CHECK_EQ(dcp_plan_deserialize(received, (size_t)length, NULL, &copy, &error),
             DCP_ERROR_CORRUPT_DATA);
    CHECK(copy == NULL);
    /* impossible lengths stop every rank before the payload, the same way everywhere */
    CHECK_EQ(dcp_metadata_chunks(0, 16, &chunks, &error), DCP_ERROR_CORRUPT_DATA);
    CHECK_EQ(dcp_metadata_chunks(DCP_METADATA_MIN_BYTES - 1, 16, &chunks, &error),
             DCP_ERROR_CORRUPT_DATA);
    CHECK_EQ(dcp_metadata_chunks(DCP_METADATA_MAX_BYTES + 1, 16, &chunks, &error),
             DCP_ERROR_CORRUPT_DATA);
    CHECK_CONTAINS(error.message, "not a libdcp buffer");
    CHECK_EQ(dcp_metadata_chunks(100, 0, &chunks, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_metadata_chunks(100, 32, &chunks, &error), DCP_OK);
    CHECK_EQ(chunks, 4);
    CHECK_EQ(dcp_metadata_chunks(DCP_METADATA_MAX_BYTES, 1 << 20, &chunks, &error), DCP_OK);
    CHECK_EQ(chunks, 4096);
    /* a rank view the same way */
    CHECK_EQ(dcp_rank_view_create(plan, 3, 0, &view, NULL), DCP_OK);
    CHECK_EQ(dcp_rank_view_serialize(view, NULL, 0, &size, NULL), DCP_OK);
    free(sent);
    free(received);
    sent = (unsigned char *)malloc(size);
    received = (unsigned char *)malloc(size);
    CHECK_EQ(dcp_rank_view_serialize(view, sent, size, &size, NULL), DCP_OK);
    CHECK_EQ(broadcast_bytes(sent, size, 24, received, size, &length, &error), DCP_OK);
    CHECK_EQ(dcp_rank_view_deserialize(received, (size_t)length, NULL, &view_copy, &error),
             DCP_OK);
    CHECK(view_copy != NULL);
    if (view_copy) {
        CHECK_EQ(view_copy->local_tokens, view->local_tokens);
        CHECK_EQ(view_copy->cp, view->cp);
        CHECK_EQ(view_copy->num_samples, view->num_samples);
    }
    dcp_rank_view_destroy(view);
    dcp_rank_view_destroy(view_copy);
    dcp_plan_destroy(plan);
    free(sent);
    free(received);
    free(again);
}

/* The set's max_cp: the CP size at which the longest sample runs fastest alone, by brute force
   over the cost model, never above config's max_cp nor below the smallest feasible. */
static void comm_max_cp_is_the_fastest_useful_cp(void)
{
    dcp_rng rng;
    dcp_error error;
    int32_t trial, max_cp = 0;
    dcp_config config = make_config(1024, 4096);
    dcp_rng_seed(&rng, SIMULATION_SEED);
    printf("  seed %d\n", SIMULATION_SEED);
    for (trial = 0; trial < 200; trial++) {
        dcp_config c = make_config(1 + (int32_t)dcp_rng_below(&rng, 1024),
                                   64 + (int64_t)dcp_rng_below(&rng, 8192));
        dcp_config resolved;
        int64_t length;
        int32_t cp, best = 0, cp_min = 0;
        double best_seconds = 0.0;
        dcp_status status;
        c.cost.ring_step_cost = 1e-6 * (double)(1 + dcp_rng_below(&rng, 100));
        c.cp_sizes = (dcp_cp_sizes)dcp_rng_below(&rng, 3); /* pow2, megatron, any */
        c.cost.attn_coeff = DCP_DEFAULT_ATTN_COEFF, c.cost.linear_coeff = DCP_DEFAULT_LINEAR_COEFF;
        CHECK_EQ(dcp_config_resolve(&c, &resolved, NULL), DCP_OK);
        length = 1 + (int64_t)dcp_rng_below(&rng, (uint64_t)(resolved.max_cp *
                                                              resolved.max_tokens_per_rank));
        status = dcp_cp_size_min(&c, length, &cp_min, NULL);
        CHECK_EQ(dcp_comm_max_cp(&c, length, &max_cp, &error), status);
        if (status != DCP_OK) continue;
        for (cp = cp_min; cp > 0 && cp <= resolved.max_cp;
             cp = dcp_cp_size_next(&resolved, cp)) {
            int64_t padded = 0;
            double seconds;
            CHECK_EQ(dcp_padded_length(&c, length, cp, &padded, NULL), DCP_OK);
            seconds = dcp_cost_sample_seconds(&resolved.cost, length, padded, cp) +
                      dcp_cost_ring_seconds(&resolved.cost, cp);
            if (best == 0 || seconds < best_seconds) best = cp, best_seconds = seconds;
        }
        CHECK_EQ(max_cp, best);
        CHECK(max_cp >= cp_min && max_cp <= resolved.max_cp);
    }
    /* the case: D = 1024 and 32k samples never need the whole pool */
    CHECK_EQ(dcp_comm_max_cp(&config, 32768, &max_cp, &error), DCP_OK);
    CHECK(max_cp >= 8 && max_cp < 1024);
    CHECK_EQ(dcp_comm_max_cp(&config, 0, &max_cp, &error), DCP_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(dcp_comm_max_cp(&config, 32768, NULL, &error), DCP_ERROR_INVALID_ARGUMENT);
    /* in place, as docs/nccl.md's training step does it: the config's own max_cp caps the answer */
    config.max_cp = 16;
    CHECK_EQ(dcp_comm_max_cp(&config, 1000000, &config.max_cp, &error), DCP_ERROR_INFEASIBLE);
    config.max_cp = 16;
    CHECK_EQ(dcp_comm_max_cp(&config, 16 * 4096, &config.max_cp, &error), DCP_OK);
    CHECK_EQ(config.max_cp, 16);
    config.max_cp = 4;
    CHECK_EQ(dcp_comm_max_cp(&config, 4 * 4096 + 1, &max_cp, &error), DCP_ERROR_INFEASIBLE);
    CHECK_CONTAINS(error.message, "16385");
}

/* Equal plans hash equal; any decision changed changes the hash. */
static void plan_hash_tells_plans_apart(void)
{
    dcp_rng rng;
    int32_t trial;
    dcp_rng_seed(&rng, SIMULATION_SEED + 1);
    for (trial = 0; trial < 50; trial++) {
        dcp_plan *plan = random_plan(&rng, 64, 40), *copy = NULL;
        unsigned char *bytes;
        size_t size = 0;
        uint64_t a = 0, b = 0;
        if (!plan) continue;
        CHECK_EQ(dcp_plan_hash(plan, &a, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_serialize(plan, NULL, 0, &size, NULL), DCP_OK);
        bytes = (unsigned char *)malloc(size);
        CHECK_EQ(dcp_plan_serialize(plan, bytes, size, &size, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_deserialize(bytes, size, NULL, &copy, NULL), DCP_OK);
        CHECK_EQ(dcp_plan_hash(copy, &b, NULL), DCP_OK);
        CHECK_EQ(a, b);
        copy->sample_lengths[(int32_t)dcp_rng_below(&rng, (uint64_t)copy->num_samples)] += 1;
        CHECK_EQ(dcp_plan_hash(copy, &b, NULL), DCP_OK);
        CHECK(a != b);
        memcpy(copy->sample_lengths, plan->sample_lengths,
               (size_t)plan->num_samples * sizeof(int64_t));
        copy->groups[(int32_t)dcp_rng_below(&rng, (uint64_t)copy->num_groups)].cp ^= 1;
        CHECK_EQ(dcp_plan_hash(copy, &b, NULL), DCP_OK);
        CHECK(a != b);
        free(bytes);
        dcp_plan_destroy(copy);
        dcp_plan_destroy(plan);
    }
    CHECK_EQ(dcp_plan_hash(NULL, NULL, NULL), DCP_ERROR_INVALID_ARGUMENT);
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"ring_order_is_a_permutation_of_near_neighbours",
         ring_order_is_a_permutation_of_near_neighbours},
        {"ring_peers_stay_within_two", ring_peers_stay_within_two},
        {"plan_rings_send_to_at_most_four_peers", plan_rings_send_to_at_most_four_peers},
        {"comm_tree_reaches_every_member", comm_tree_reaches_every_member},
        {"choose_takes_any_range", choose_takes_any_range},
        {"plan_groups_map_to_choices", plan_groups_map_to_choices},
        {"choose_rejects_bad_groups", choose_rejects_bad_groups},
        {"eval_override_train_cp1_eval_cp4", eval_override_train_cp1_eval_cp4},
        {"eval_overrides_nest_and_unwind", eval_overrides_nest_and_unwind},
        {"eval_override_run_restores_on_error", eval_override_run_restores_on_error},
        {"reroute_ops_pair_like_nccl", reroute_ops_pair_like_nccl},
        {"reroute_ops_reject_bad_input", reroute_ops_reject_bad_input},
        {"reroute_buffer_bound_both_sides", reroute_buffer_bound_both_sides},
        {"ring_exchange_by_message_passing", ring_exchange_by_message_passing},
        {"ring_exchange_rejects_bad_input", ring_exchange_rejects_bad_input},
        {"ring_driver_equals_reference_ring", ring_driver_equals_reference_ring},
        {"ring_scratch_layouts", ring_scratch_layouts},
        {"metadata_broadcast_protocol", metadata_broadcast_protocol},
        {"comm_max_cp_is_the_fastest_useful_cp", comm_max_cp_is_the_fastest_useful_cp},
        {"plan_hash_tells_plans_apart", plan_hash_tells_plans_apart},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
