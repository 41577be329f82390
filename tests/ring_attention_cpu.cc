/* examples/ring_attention_nccl.cu on the CPU execution model: its ranks as threads of this
   process over the host NCCL transport (tests/fake_nccl: each rank a device thread that runs
   the model's grids). Each run is the example unchanged from the plan broadcast to the last
   destroy: the reroute, ring attention forward and backward on every group of every
   microbatch (all on the set's one communicator), the evaluation override, and each rank's
   comparison of its rows of out, lse, dq, dk and dv with the single-rank attention call on the
   same samples (the one-rank result); a run passes when every rank matches and the transport
   recorded no violation. Runs: 2, 4 and 8 ranks with the default sizes (powers of two); groups
   of 3, 5 and 6 ranks, each the one size of its plan (DCP_CP_SIZES=c on 2c or c ranks, so
   groups of 3 sit at ranks 0 and 3); and, with DCP_RING_CPU_LARGE=1 (make bench-ring-cpu: a
   minute and more each, too heavy for make test), groups of 12 on 12 ranks and a pool of 48
   planning groups of 48 and of 12 (DCP_CP_SIZES=12,48).
   The workload is the example's, smaller (RING_* below), so that the checked build runs it in
   seconds. Built as build/ring_attention_nccl-cpu (mk/cpu_model.mk); `make test` runs the
   rings of 2, 4 and 8 under the sm_80 profile and the groups of 3, 5 and 6 under sm_89 (each
   run once: the kernels' own tests cover both profiles in full). */
#define RANK_LOCAL thread_local
#define RING_NO_MAIN
#define SAMPLES 6
#define MAX_TOKENS_PER_RANK 48
#define HEADS 2
#define KV_HEADS 1
#include "../examples/ring_attention_nccl.cu"
#include "fake_nccl/fake_runtime.c"
#include "test.h"

/* The 48-rank run's tokens a rank: fewer than the others', so that its samples (up to 48 x 8)
   stay light for the checked model while those above 12 x 8 need the group of 48 (its plan:
   4 samples on groups of 12, 2 on the group of 48, 3 microbatches). */
#define LARGE_POOL 48
#define LARGE_TOKENS_PER_RANK "8"
/* The transport's bound on a host wait in the heavy runs: a rank's stream may wait minutes for
   its peers' checked grids on a loaded machine (the default bound would call that a hang). */
#define LARGE_HANG_MS (30.0 * 60.0 * 1000.0)

static int ring_thread(int rank, int ranks, void *id_path)
{
    return ring_rank_main(rank, ranks, rank, (const char *)id_path);
}

/* The example on `ranks` threads with DCP_CP_SIZES = sizes (NULL: the default). */
static void ring_on_sizes(int ranks, const char *sizes)
{
    char id_path[64];
    snprintf(id_path, sizeof id_path, "/tmp/dcp_ring_cpu_id.%d.%d", (int)getpid(), ranks);
    if (sizes) setenv("DCP_CP_SIZES", sizes, 1);
    else unsetenv("DCP_CP_SIZES");
    CHECK_EQ(fake_run_ranks(ranks, ring_thread, id_path), 0);
    unsetenv("DCP_CP_SIZES");
}

static void ring_of_2(void) { ring_on_sizes(2, NULL); }
static void ring_of_4(void) { ring_on_sizes(4, NULL); }
static void ring_of_8(void) { ring_on_sizes(8, NULL); }
static void groups_of_3(void) { ring_on_sizes(6, "3"); }
static void groups_of_5(void) { ring_on_sizes(5, "5"); }
static void groups_of_6(void) { ring_on_sizes(6, "6"); }

/* 1 when the heavy runs are asked for (DCP_RING_CPU_LARGE=1), else says why they skip. */
static int large_runs(void)
{
    const char *large = getenv("DCP_RING_CPU_LARGE");
    if (large && atoi(large) == 1) {
        fake_set_hang_bound(LARGE_HANG_MS);
        return 1;
    }
    test_skip("DCP_RING_CPU_LARGE=1 runs it (make bench-ring-cpu)");
    return 0;
}

static void groups_of_12(void)
{
    if (large_runs()) ring_on_sizes(12, "12");
}

static void pool_of_48_groups_of_12_and_48(void)
{
    if (!large_runs()) return;
    setenv("DCP_TOKENS_PER_RANK", LARGE_TOKENS_PER_RANK, 1);
    ring_on_sizes(LARGE_POOL, "12,48");
    unsetenv("DCP_TOKENS_PER_RANK");
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"ring_of_2", ring_of_2},
        {"ring_of_4", ring_of_4},
        {"ring_of_8", ring_of_8},
        {"groups_of_3", groups_of_3},
        {"groups_of_5", groups_of_5},
        {"groups_of_6", groups_of_6},
        {"groups_of_12", groups_of_12},
        {"pool_of_48_groups_of_12_and_48", pool_of_48_groups_of_12_and_48},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
