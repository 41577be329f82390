/* quarantine.h - a dcp_allocator that never reuses memory (tests/test_nccl_host.c,
   tests/test_nccl_gpu.cu): a freed block is filled with QUARANTINE_BYTE and kept, so that a
   write into it after its free -- NCCL's non-blocking split job landing its child in a set
   that was freed -- shows in quarantine_intact(). Include after dcp.h, with <pthread.h>. */
#ifndef DCP_TESTS_QUARANTINE_H
#define DCP_TESTS_QUARANTINE_H
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define QUARANTINE_BYTE 0xDB

typedef struct quarantine_block {
    struct quarantine_block *next;
    size_t size;
} quarantine_block;

static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static quarantine_block *quarantined;

static void *quarantine_alloc(void *user, size_t size)
{
    quarantine_block *b = (quarantine_block *)malloc(sizeof *b + size);
    (void)user;
    if (!b) return NULL;
    b->size = size;
    return b + 1;
}

static void quarantine_free(void *user, void *ptr)
{
    quarantine_block *b = (quarantine_block *)ptr - 1;
    (void)user;
    memset(ptr, QUARANTINE_BYTE, b->size);
    pthread_mutex_lock(&quarantine_lock);
    b->next = quarantined, quarantined = b;
    pthread_mutex_unlock(&quarantine_lock);
}

static dcp_allocator quarantine_allocator(void)
{
    dcp_allocator a;
    a.alloc = quarantine_alloc, a.free = quarantine_free, a.user = NULL;
    return a;
}

/* 1 when no quarantined block was written after its free; releases them all. */
static int quarantine_intact(void)
{
    int intact = 1;
    pthread_mutex_lock(&quarantine_lock);
    while (quarantined) {
        quarantine_block *b = quarantined;
        const unsigned char *bytes = (const unsigned char *)(b + 1);
        size_t i;
        for (i = 0; i < b->size; i++) intact &= bytes[i] == QUARANTINE_BYTE;
        quarantined = b->next;
        free(b);
    }
    pthread_mutex_unlock(&quarantine_lock);
    return intact;
}

#endif
