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

#include <pthread.h>

#define MAX_RANKS 8

typedef struct rank_thread {
    pthread_t thread;
    int rank, ranks, status;
    const char *id_path;
} rank_thread;

static void *rank_thread_main(void *arg)
{
    rank_thread *t = (rank_thread *)arg;
    fake_bind_rank(t->rank);
    t->status = ring_rank_main(t->rank, t->ranks, t->rank, t->id_path);
    return NULL;
}

static void ring_on(int ranks)
{
    rank_thread threads[MAX_RANKS];
    char id_path[64];
    const char *violation = "";
    int r;
    snprintf(id_path, sizeof id_path, "/tmp/dcp_ring_cpu_id.%d.%d", (int)getpid(), ranks);
    fake_devices_create(ranks);
    for (r = 0; r < ranks; r++) {
        threads[r].rank = r, threads[r].ranks = ranks, threads[r].id_path = id_path;
        CHECK_EQ(pthread_create(&threads[r].thread, NULL, rank_thread_main, &threads[r]), 0);
    }
    for (r = 0; r < ranks; r++) {
        pthread_join(threads[r].thread, NULL);
        CHECK_EQ(threads[r].status, 0);
    }
    CHECK_EQ(fake_violations(&violation), 0);
    if (*violation) fprintf(stderr, "host transport: %s\n", violation);
    fake_job_destroy();
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
