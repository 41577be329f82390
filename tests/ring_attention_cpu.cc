/* examples/ring_attention_nccl.cu on the CPU execution model: its ranks as threads of this
   process over the host NCCL transport (tests/fake_nccl: each rank a device thread that runs
   the model's grids), at 2, 4 and 8 ranks. Each run is the example unchanged from the plan
   broadcast to the last destroy: the reroute, ring attention forward and backward on every
   group of every microbatch, the evaluation override, and each rank's comparison of its rows
   of out, lse, dq, dk and dv with the single-rank attention call on the same samples (the
   one-rank result); a run passes when every rank matches and the transport recorded no
   violation. The workload is the example's, smaller (RING_* below), so that the checked
   build runs it in seconds. Built as build/ring_attention_nccl-cpu (Makefile, "ranks on the
   model"); `make test` runs it under the sm_80 and sm_89 profiles. */
#define RANK_LOCAL thread_local
#define RING_NO_MAIN
#define SAMPLES 6
#define MAX_TOKENS_PER_RANK 48
#define HEADS 2
#define KV_HEADS 1
#include "../examples/ring_attention_nccl.cu"
#include "fake_nccl/fake_runtime.c"
#include "test.h"

static int ring_thread(int rank, int ranks, void *id_path)
{
    return ring_rank_main(rank, ranks, rank, (const char *)id_path);
}

static void ring_on(int ranks)
{
    char id_path[64];
    snprintf(id_path, sizeof id_path, "/tmp/dcp_ring_cpu_id.%d.%d", (int)getpid(), ranks);
    CHECK_EQ(fake_run_ranks(ranks, ring_thread, id_path), 0);
}

static void ring_of_2(void) { ring_on(2); }
static void ring_of_4(void) { ring_on(4); }
static void ring_of_8(void) { ring_on(8); }

int main(int argc, char **argv)
{
    static const test_case tests[] = {
        {"ring_of_2", ring_of_2},
        {"ring_of_4", ring_of_4},
        {"ring_of_8", ring_of_8},
    };
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
