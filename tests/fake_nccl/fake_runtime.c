/* The host transport behind tests/fake_nccl/nccl.h and cuda_runtime.h (those headers say what
   it holds its callers to). Simulated ranks are host threads; each has a device thread that
   runs its streams; communicators of one simulated job meet in groups (mailboxes, collectives,
   splits, connection links). One mutex guards all of it; host threads that NCCL or CUDA would
   block wait on condition variables with a bound past which the wait is recorded as a hang.
   Test-only global state: fake_job_create / fake_job_destroy bracket a job, and what a caller
   got wrong is counted by kind (protocol, host hang, stuck send) for the test to assert on.
   Included by the test file (one translation unit), after _POSIX_C_SOURCE is defined. In the
   CPU execution model's programs (FAKE_NCCL_CUDA_RUNTIME: the toolkit's types) a kernel launch
   is the model's grid as a host function on these streams (cudaLaunchHostFunc).

   Sections: basics (lock, clock, violations) -> devices and their memory -> streams and the op
   queue -> NCCL kernels (parts, mailboxes, collectives) -> communicators (config, shared
   resources, connections, background jobs) -> the CUDA runtime -> the NCCL API -> the test
   interface. */
#include "nccl.h"

#ifdef FAKE_NCCL_CUDA_RUNTIME /* the toolkit's handle types name these structures */
#define fake_stream CUstream_st
#define fake_event CUevent_st
#include "cuda_cpu.h"
#endif

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Default bound on a host wait NCCL or CUDA would make forever, and on a started send that
   nobody receives; tests that expect one lower it (fake_set_hang_bound). */
#define FAKE_DEFAULT_HANG_MS 30000.0
/* Communication kernels one device runs at once: the worst case NCCL's docs allow for. */
#define FAKE_KERNEL_SLOTS 1
/* Kernels a communicator may have queued before a launch waits for room (NCCL's work FIFO). */
#define FAKE_WORK_FIFO 1024
/* Pause of a query that finds its stream not ready: the device is busy, the host sleeps. */
#define FAKE_NOT_READY_PAUSE_NS 20000L
/* How often an idle device re-checks its stuck sends, and a blocked host its bound. */
#define FAKE_DEVICE_TICK_MS 100.0
#define FAKE_WAIT_SLICE_MS 10.0
#define FAKE_THREAD_STACK_BYTES ((size_t)1 << 20)
/* Bytes cudaMalloc fills new memory with: every float reads as NaN until written. */
#define FAKE_POISON 0xFF
/* cudaMalloc's alignment (the kernels' vector and cp.async accesses rely on it). */
#define FAKE_MALLOC_ALIGNMENT 256
/* What cudaMemGetInfo reports as a device's memory. */
#define FAKE_DEVICE_MEMORY_BYTES ((size_t)80 << 30)
/* NCCL's config defaults (parseCommConfig). */
#define FAKE_DEFAULT_BLOCKING 1
#define FAKE_DEFAULT_CGA_CLUSTER 4
#define FAKE_DEFAULT_MIN_CTAS 1
#define FAKE_DEFAULT_MAX_CTAS 32
#define FAKE_DEFAULT_SPLIT_SHARE 0
/* From this version on ncclCommAbort inside a group only raises the flag; its wait (the
   reclaim) runs in ncclGroupEnd, together with the others' (ncclAsyncLaunch of commReclaim). */
#define FAKE_GROUPED_ABORT_VERSION NCCL_VERSION(2, 22, 0)

/* ------------------------------------------------------------------------------ basics */

typedef enum {
    FAKE_PROTOCOL, /* a call NCCL or CUDA refuses or leaves undefined */
    FAKE_HANG,     /* the host blocked where NCCL or CUDA would block forever */
    FAKE_STUCK,    /* a started send nobody received: an unfused or mis-ordered p2p */
    FAKE_KINDS
} fake_violation_kind;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_control = PTHREAD_COND_INITIALIZER; /* any change a host waits on */
static pthread_mutex_t fake_violation_lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_violation_counts[FAKE_KINDS];
static char fake_violation_text[512];
static double fake_hang_ms = FAKE_DEFAULT_HANG_MS;

static double fake_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec * 1e3 + (double)now.tv_nsec * 1e-6;
}

/* Violations of every kind so far (with fake_violation_lock held, or after the threads). */
static int fake_violation_total(void)
{
    int kind, total = 0;
    for (kind = 0; kind < FAKE_KINDS; kind++) total += fake_violation_counts[kind];
    return total;
}

static void fake_violation(fake_violation_kind kind, const char *format, ...)
{
    va_list args;
    pthread_mutex_lock(&fake_violation_lock);
    if (fake_violation_total() == 0) {
        va_start(args, format);
        vsnprintf(fake_violation_text, sizeof fake_violation_text, format, args);
        va_end(args);
    }
    fake_violation_counts[kind]++;
    pthread_mutex_unlock(&fake_violation_lock);
}

static void fake_sleep_ms(double ms)
{
    struct timespec pause;
    pause.tv_sec = (time_t)(ms / 1e3);
    pause.tv_nsec = (long)((ms - (double)pause.tv_sec * 1e3) * 1e6);
    nanosleep(&pause, NULL);
}

/* With fake_lock held: sleeps on cond for at most ms. */
static void fake_wait_ms(pthread_cond_t *cond, double ms)
{
    struct timespec until;
    long nanoseconds;
    clock_gettime(CLOCK_REALTIME, &until);
    nanoseconds = until.tv_nsec + (long)(ms * 1e6);
    until.tv_sec += nanoseconds / 1000000000L;
    until.tv_nsec = nanoseconds % 1000000000L;
    pthread_cond_timedwait(cond, &fake_lock, &until);
}

/* With fake_lock held: blocks the calling host thread until ready(arg) is positive (1),
   negative (-1: the wait was given up, e.g. its communicator was aborted), or the hang bound
   passes (0): NCCL or CUDA would wait forever there, so the hang is recorded. */
static int fake_block_host(int (*ready)(const void *), const void *arg, int rank,
                           const char *what)
{
    const double start = fake_now_ms();
    for (;;) {
        const int r = ready(arg);
        if (r != 0) return r > 0 ? 1 : -1;
        if (fake_now_ms() - start > fake_hang_ms) {
            fake_violation(FAKE_HANG,
                           "rank %d: %s blocked the host for %.0f ms (it would block forever)",
                           rank, what, fake_now_ms() - start);
            return 0;
        }
        fake_wait_ms(&fake_control, FAKE_WAIT_SLICE_MS);
    }
}

/* -------------------------------------------------------------- devices and their memory */

typedef struct fake_block {
    struct fake_block *next;
    unsigned char *base;
    size_t bytes;
    int pinned; /* cudaMallocHost; else device memory */
} fake_block;

typedef struct fake_device {
    int rank;
    pthread_t thread;
    pthread_cond_t wake; /* something it may run has changed */
    struct fake_stream *streams;
    struct fake_stream *legacy; /* the NULL stream, created at its first use */
    fake_block *blocks;
    int running_kernels;
    unsigned long launches;          /* communication kernels launched on it so far */
    long comms_made;                 /* communicators its rank made (split, shrink, init) */
    const struct fake_op *next_kernel; /* of those that could start now, the first launched */
    int shutdown;
} fake_device;

static fake_device *fake_devices;
static int fake_device_count;
static __thread fake_device *fake_thread_device;

static void fake_wake(fake_device *d)
{
    if (d) pthread_cond_signal(&d->wake);
}

static void fake_wake_all(void)
{
    int r;
    for (r = 0; r < fake_device_count; r++) pthread_cond_signal(&fake_devices[r].wake);
    pthread_cond_broadcast(&fake_control);
}

/* The calling thread's device; a CUDA call from a thread bound to no rank is a test bug. */
static fake_device *fake_current_device(const char *call)
{
    if (!fake_thread_device)
        fake_violation(FAKE_PROTOCOL, "%s from a thread bound to no rank (fake_bind_rank)", call);
    return fake_thread_device;
}

typedef enum { FAKE_PAGEABLE, FAKE_PINNED, FAKE_DEVICE_MEMORY } fake_memory;

/* What [p, p + bytes) is on device d: inside one cudaMalloc / cudaMallocHost block, or
   pageable. With fake_lock held. */
static fake_memory fake_memory_of(const fake_device *d, const void *p, size_t bytes)
{
    const unsigned char *at = (const unsigned char *)p;
    const fake_block *b;
    for (b = d ? d->blocks : NULL; b; b = b->next)
        if (at >= b->base && at <= b->base + b->bytes && bytes <= (size_t)(b->base + b->bytes - at))
            return b->pinned ? FAKE_PINNED : FAKE_DEVICE_MEMORY;
    return FAKE_PAGEABLE;
}

static cudaError_t fake_register(void **pointer, size_t bytes, int pinned, const char *call)
{
    fake_device *d = fake_current_device(call);
    fake_block *b;
    void *base = NULL;
    if (!pointer) return cudaErrorInvalidValue;
    *pointer = NULL;
    if (!d) return cudaErrorInvalidValue;
    b = (fake_block *)malloc(sizeof *b);
    if (!b || posix_memalign(&base, FAKE_MALLOC_ALIGNMENT, bytes ? bytes : 1) != 0) {
        free(b);
        return cudaErrorMemoryAllocation;
    }
    b->base = (unsigned char *)base;
    memset(b->base, FAKE_POISON, bytes);
    b->bytes = bytes, b->pinned = pinned;
    pthread_mutex_lock(&fake_lock);
    b->next = d->blocks, d->blocks = b;
    pthread_mutex_unlock(&fake_lock);
    *pointer = b->base;
    return cudaSuccess;
}

static cudaError_t fake_unregister(void *pointer, int pinned, const char *call)
{
    fake_device *d = fake_current_device(call);
    fake_block **link, *b = NULL;
    if (!pointer) return cudaSuccess;
    if (!d) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    for (link = &d->blocks; *link; link = &(*link)->next)
        if ((*link)->base == pointer && (*link)->pinned == pinned) {
            b = *link;
            *link = b->next;
            break;
        }
    pthread_mutex_unlock(&fake_lock);
    if (!b) {
        fake_violation(FAKE_PROTOCOL, "rank %d: %s of a pointer its allocator did not return",
                       d->rank, call);
        return cudaErrorInvalidValue;
    }
    free(b->base), free(b);
    return cudaSuccess;
}

/* --------------------------------------------------------------- streams and the op queue
   An op is one unit of device work. Its device thread runs the head op of each stream when it
   can: a copy or set at once; a host function (a kernel launch) with the lock released; an
   event record at once and an event wait when the event has passed its target; an NCCL
   kernel when its communicator's earlier kernels are done and a kernel slot is free, after
   which it completes as its parts do. */

typedef enum {
    FAKE_OP_COPY,
    FAKE_OP_SET,
    FAKE_OP_HOST,
    FAKE_OP_RECORD,
    FAKE_OP_WAIT,
    FAKE_OP_KERNEL
} fake_op_kind;

typedef enum { FAKE_SEND, FAKE_RECV, FAKE_ALLREDUCE, FAKE_BROADCAST } fake_part_kind;

typedef struct fake_message {
    struct fake_message *next; /* in its mailbox */
    size_t bytes;
    int consumed;
    unsigned char data[1];
} fake_message;

/* One NCCL call inside a kernel. */
typedef struct fake_part {
    struct fake_part *next;
    fake_part_kind kind;
    void *destination;
    const void *source;
    size_t bytes; /* the payload */
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t reduction;
    int peer, root;
    unsigned long sequence;  /* collectives: the communicator's n-th */
    fake_message *message;   /* a send's, once its kernel started */
    int done;
} fake_part;

typedef struct fake_op {
    fake_op_kind kind;
    struct fake_op *next;
    void *destination;
    const void *source;
    size_t bytes;
    int value;
    int (*fn)(void *);
    void *arg;
    cudaEvent_t event;
    unsigned long target;
    /* kernels */
    ncclComm_t comm;
    struct fake_stream *stream; /* where it goes once launched */
    fake_part *parts, **parts_tail;
    unsigned long ticket;   /* its place in the communicator's order */
    unsigned long launched; /* its place in the device's launch order */
    int started, reported;
    double started_ms;
} fake_op;

struct fake_stream {
    fake_device *device;
    unsigned flags; /* cudaStreamNonBlocking: no implicit order with the legacy stream */
    fake_op *head, *tail;
    cudaError_t error;
    int busy;      /* a host function of it runs, the lock released */
    int destroyed; /* by its owner, with work pending: freed when that is done */
    struct fake_stream *next_of_device;
};

struct fake_event {
    fake_device *device;
    unsigned long recorded, completed;
    double completed_ms; /* host time when its last record ran */
    struct fake_event *next_dead;
};
static struct fake_event *fake_dead_events;

static fake_op *fake_op_new(fake_op_kind kind)
{
    fake_op *op = (fake_op *)calloc(1, sizeof *op);
    op->kind = kind;
    op->parts_tail = &op->parts;
    return op;
}

static void fake_op_free(fake_op *op)
{
    while (op->parts) { /* a message still in its mailbox is the mailbox's */
        fake_part *p = op->parts;
        op->parts = p->next;
        if (p->message && p->message->consumed) free(p->message);
        free(p);
    }
    if (op->kind == FAKE_OP_HOST) free(op->arg);
    free(op);
}

/* With fake_lock held. */
static void fake_append(cudaStream_t stream, fake_op *op)
{
    op->next = NULL;
    if (stream->tail) stream->tail->next = op;
    else stream->head = op;
    stream->tail = op;
    fake_wake(stream->device);
}

/* The stream a call names: NULL is the legacy stream of the calling thread's device (NULL
   when the thread is bound to no rank). */
static cudaStream_t fake_stream_or_legacy(cudaStream_t stream, const char *call)
{
    fake_device *d;
    if (stream) return stream;
    d = fake_current_device(call);
    if (!d) return NULL;
    pthread_mutex_lock(&fake_lock);
    if (!d->legacy) {
        d->legacy = (cudaStream_t)calloc(1, sizeof *d->legacy);
        d->legacy->device = d;
        d->legacy->next_of_device = d->streams;
        d->streams = d->legacy;
    }
    pthread_mutex_unlock(&fake_lock);
    return d->legacy;
}

static cudaError_t fake_push(cudaStream_t stream, fake_op *op)
{
    stream = fake_stream_or_legacy(stream, "a launch");
    if (!stream) {
        fake_op_free(op);
        return cudaErrorInvalidValue;
    }
    pthread_mutex_lock(&fake_lock);
    fake_append(stream, op);
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}

/* Kernel stand-ins: fn(arg) runs on the device thread when the stream reaches it; arg is freed
   after; nonzero is a failed launch (a sticky error of the stream). */
static cudaError_t fake_enqueue_host(cudaStream_t stream, int (*fn)(void *), void *arg)
{
    fake_op *op = fake_op_new(FAKE_OP_HOST);
    op->fn = fn, op->arg = arg;
    return fake_push(stream, op);
}

/* ------------------------------------------------------------------------ NCCL kernels */

typedef struct fake_collective {
    struct fake_collective *next;
    unsigned long sequence;
    fake_part_kind kind;
    size_t bytes;
    int root;
    int deposited, consumed;
    unsigned char **data; /* [size] */
} fake_collective;

struct fake_group;
typedef struct fake_split {
    struct fake_split *next;
    unsigned long sequence;
    int size, deposited, broken; /* size: the members that come (a shrink's excluded do not);
                                    broken: a member was aborted before everyone came */
    struct fake_group *parent;
    int *color, *key;            /* [parent rank]: NCCL_SPLIT_NOCOLOR until it comes */
    unsigned char *joined;       /* [parent rank]: 1 once it came, 2 if excluded (shrink) */
    struct fake_group **child; /* [rank]: the child group of that rank's color */
} fake_split;

enum { FAKE_LINK_SEND = 1, FAKE_LINK_RECV = 2, FAKE_LINKED = 3 };

/* The point-to-point state of one ordered pair (from, to): its mailbox and connection. Kept per
   sender in a list of the peers it has used, so that a group of thousands of ranks costs what
   its ranks really talk to, not size^2 (a rank of the layer talks to a handful). */
typedef struct fake_channel {
    struct fake_channel *next; /* the sender's next channel */
    int to;
    fake_message *head, *tail;
    unsigned char link;  /* FAKE_LINK_* sides */
    unsigned long sends; /* sends posted from -> to so far */
} fake_channel;

typedef struct fake_group {
    struct fake_group *next_of_job;
    unsigned long init_id; /* joined by ncclCommInitRankConfig with this id; 0: not */
    int size;
    ncclComm_t *members;       /* [rank], once each exists */
    fake_channel **channels;   /* [from]: the channels from that rank */
    unsigned char *ring_ready; /* [rank]: its collectives connected */
    int ring_members;
    fake_collective *collectives;
    fake_split *splits;
} fake_group;

/* NCCL's resources that splitShare children share with their parent: the abort flag and the
   internal stream that orders the communicator's kernels (tickets issued and completed). */
typedef struct fake_shared {
    struct fake_shared *next_of_job;
    int abort;
    unsigned long issued, completed;
} fake_shared;

struct fake_comm {
    struct fake_comm *next_of_job; /* kept until the job ends, so a late call is caught */
    fake_group *group;
    int rank;
    fake_device *device;
    ncclConfig_t config; /* resolved */
    fake_shared *shared;
    ncclResult_t state;    /* ncclSuccess, ncclInProgress while a job runs, or its error */
    ncclResult_t injected; /* a test's asynchronous error */
    int jobs;              /* background threads working for it */
    int outstanding;       /* kernels launched and not done */
    int finalized, dead;   /* dead: destroyed or aborted */
    int made;              /* 1: made by a rank (split, shrink, ncclCommInitRankConfig), not by
                              the test's job */
    unsigned long collectives, splits;
    unsigned long long sent_bytes, received_bytes; /* point-to-point payload that ran */
};

static fake_group *fake_groups;
static ncclComm_t fake_comms;
static fake_shared *fake_shareds;

static int fake_aborted(const ncclComm_t comm) { return comm->shared->abort; }

static size_t fake_type_size(ncclDataType_t type)
{
    switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32: return 4;
    case ncclInt64:
    case ncclUint64: return 8;
    case ncclFloat32: return sizeof(float);
    case ncclFloat64: return sizeof(double);
    }
    return 0;
}

static int fake_reduce_pick(ncclRedOp_t op, int greater)
{
    return op == ncclMax ? greater : !greater;
}

/* One element of a floating-point reduction (sum, max or min) as double. */
static double fake_float_at(const unsigned char *p, ncclDataType_t type)
{
    float f;
    double x;
    if (type == ncclFloat64) {
        memcpy(&x, p, sizeof x);
        return x;
    }
    memcpy(&f, p, sizeof f);
    return f;
}

static void fake_reduce_float(const fake_collective *c, int size, ncclDataType_t type,
                              ncclRedOp_t op, size_t count, unsigned char *out)
{
    const size_t width = fake_type_size(type);
    size_t i;
    int r;
    for (i = 0; i < count; i++) {
        double acc = fake_float_at(c->data[0] + width * i, type);
        for (r = 1; r < size; r++) {
            const double x = fake_float_at(c->data[r] + width * i, type);
            if (op == ncclSum) acc += x;
            else if (fake_reduce_pick(op, x > acc)) acc = x;
        }
        if (type == ncclFloat64) {
            memcpy(out + width * i, &acc, width);
        } else {
            const float f = (float)acc;
            memcpy(out + width * i, &f, width);
        }
    }
}

/* out[i] = op over ranks of element i (sum, max or min). */
static void fake_reduce(const fake_collective *c, int size, ncclDataType_t type, ncclRedOp_t op,
                        size_t count, unsigned char *out)
{
    const size_t width = fake_type_size(type);
    const int is_signed = type == ncclInt8 || type == ncclInt32 || type == ncclInt64;
    size_t i;
    int r;
    if (type == ncclFloat32 || type == ncclFloat64) {
        fake_reduce_float(c, size, type, op, count, out);
        return;
    }
    for (i = 0; i < count; i++) {
        uint64_t acc = 0, x = 0;
        for (r = 0; r < size; r++) {
            int64_t sx, sa;
            memcpy(&x, c->data[r] + width * i, width); /* little-endian low bytes */
            if (is_signed && width < 8 && (x >> (8 * width - 1)) & 1)
                x |= ~UINT64_C(0) << (8 * width); /* sign-extended */
            if (r == 0 || op == ncclSum) {
                acc = r == 0 ? x : acc + x;
                continue;
            }
            sx = (int64_t)x, sa = (int64_t)acc;
            if (fake_reduce_pick(op, is_signed ? sx > sa : x > acc)) acc = x;
        }
        memcpy(out + width * i, &acc, width);
    }
}

/* The channel from -> to, made at its first use. With fake_lock held. */
static fake_channel *fake_channel_of(fake_group *g, int from, int to)
{
    fake_channel *c;
    for (c = g->channels[from]; c && c->to != to; c = c->next) {
    }
    if (c) return c;
    c = (fake_channel *)calloc(1, sizeof *c);
    c->to = to;
    c->next = g->channels[from];
    g->channels[from] = c;
    return c;
}

static fake_message **fake_box(fake_group *g, int from, int to, int tail)
{
    fake_channel *c = fake_channel_of(g, from, to);
    return tail ? &c->tail : &c->head;
}

static void fake_post(ncclComm_t comm, fake_part *p)
{
    fake_group *g = comm->group;
    fake_message *m = (fake_message *)malloc(sizeof *m + p->bytes);
    fake_message **head = fake_box(g, comm->rank, p->peer, 0);
    fake_message **tail = fake_box(g, comm->rank, p->peer, 1);
    m->next = NULL, m->bytes = p->bytes, m->consumed = 0;
    memcpy(m->data, p->source, p->bytes);
    fake_channel_of(g, comm->rank, p->peer)->sends++;
    if (*tail) (*tail)->next = m;
    else *head = m;
    *tail = m;
    p->message = m;
    comm->sent_bytes += p->bytes;
    if (g->members[p->peer]) fake_wake(g->members[p->peer]->device);
}

/* A send whose kernel quit: its message leaves the mailbox unread. */
static void fake_withdraw(ncclComm_t comm, fake_part *p)
{
    fake_group *g = comm->group;
    fake_message **link = fake_box(g, comm->rank, p->peer, 0), *previous = NULL;
    for (; *link && *link != p->message; previous = *link, link = &(*link)->next) {
    }
    if (!*link) return;
    *link = p->message->next;
    if (*fake_box(g, comm->rank, p->peer, 1) == p->message)
        *fake_box(g, comm->rank, p->peer, 1) = previous;
    free(p->message);
    p->message = NULL;
}

static int fake_receive(ncclComm_t comm, fake_part *p)
{
    fake_group *g = comm->group;
    fake_message **head = fake_box(g, p->peer, comm->rank, 0);
    fake_message *m = *head;
    if (!m) return 0;
    *head = m->next;
    if (!m->next) *fake_box(g, p->peer, comm->rank, 1) = NULL;
    if (m->bytes != p->bytes)
        fake_violation(FAKE_PROTOCOL,
                       "rank %d: a receive of %zu bytes from rank %d met a send of %zu",
                       comm->rank, p->bytes, p->peer, m->bytes);
    memcpy(p->destination, m->data, m->bytes < p->bytes ? m->bytes : p->bytes);
    comm->received_bytes += m->bytes;
    m->consumed = 1; /* the sender frees it */
    if (g->members[p->peer]) fake_wake(g->members[p->peer]->device);
    return 1;
}

static fake_collective *fake_collective_of(fake_group *g, const fake_part *p)
{
    fake_collective *c;
    for (c = g->collectives; c && c->sequence != p->sequence; c = c->next) {
    }
    if (c) return c;
    c = (fake_collective *)calloc(1, sizeof *c);
    c->sequence = p->sequence, c->kind = p->kind, c->bytes = p->bytes, c->root = p->root;
    c->data = (unsigned char **)calloc((size_t)g->size, sizeof(unsigned char *));
    c->next = g->collectives;
    g->collectives = c;
    return c;
}

static void fake_deposit(ncclComm_t comm, fake_part *p)
{
    fake_group *g = comm->group;
    fake_collective *c = fake_collective_of(g, p);
    int r;
    if (c->kind != p->kind || c->bytes != p->bytes || c->root != p->root)
        fake_violation(FAKE_PROTOCOL, "rank %d: collective %lu differs in kind, size or root",
                       comm->rank, p->sequence);
    c->data[comm->rank] = (unsigned char *)malloc(p->bytes ? p->bytes : 1);
    if (p->bytes) memcpy(c->data[comm->rank], p->source, p->bytes);
    if (++c->deposited == g->size)
        for (r = 0; r < g->size; r++)
            if (g->members[r]) fake_wake(g->members[r]->device);
}

static int fake_collect(ncclComm_t comm, fake_part *p)
{
    fake_group *g = comm->group;
    fake_collective *c = fake_collective_of(g, p), **link;
    int r;
    if (c->deposited < g->size) return 0;
    if (p->kind == FAKE_BROADCAST) {
        if (p->bytes) memcpy(p->destination, c->data[c->root], p->bytes);
    } else
        fake_reduce(c, g->size, p->type, p->reduction, p->count, (unsigned char *)p->destination);
    if (++c->consumed == g->size) {
        for (link = &g->collectives; *link != c; link = &(*link)->next) {
        }
        *link = c->next;
        for (r = 0; r < g->size; r++) free(c->data[r]);
        free(c->data), free(c);
    }
    return 1;
}

static void fake_kernel_start(fake_device *d, fake_op *k)
{
    fake_part *p;
    k->started = 1, k->started_ms = fake_now_ms();
    d->running_kernels++;
    for (p = k->parts; p; p = p->next) {
        if (p->kind == FAKE_SEND) fake_post(k->comm, p);
        else if (p->kind != FAKE_RECV) fake_deposit(k->comm, p);
    }
}

/* Advances the parts of a started kernel; 1 when every part is done. */
static int fake_kernel_parts(fake_op *k, int *progressed)
{
    fake_part *p;
    int all = 1;
    for (p = k->parts; p; p = p->next) {
        if (!p->done) {
            if (p->kind == FAKE_SEND) {
                if (p->message->consumed) {
                    free(p->message);
                    p->message = NULL;
                    p->done = 1;
                }
            } else if (p->kind == FAKE_RECV)
                p->done = fake_receive(k->comm, p);
            else
                p->done = fake_collect(k->comm, p);
            *progressed |= p->done;
        }
        all &= p->done;
    }
    return all;
}

static void fake_report_stuck(fake_op *k)
{
    fake_part *p;
    if (k->reported || fake_now_ms() - k->started_ms <= fake_hang_ms) return;
    for (p = k->parts; p; p = p->next)
        if (p->kind == FAKE_SEND && !p->done) {
            fake_violation(FAKE_STUCK,
                           "rank %d: a send of %zu bytes to rank %d waited %.0f ms for its "
                           "receive (an unfused or mis-ordered point-to-point?)",
                           k->comm->rank, p->bytes, p->peer, fake_now_ms() - k->started_ms);
            k->reported = 1;
            return;
        }
}

/* 1: the kernel is done (it finished, or quit because its abort flag was raised). */
static int fake_kernel_step(fake_device *d, fake_op *k, int *progressed)
{
    ncclComm_t comm = k->comm;
    if (!k->started) { /* a free slot goes to the kernel launched first, as on a GPU */
        if (k != d->next_kernel || d->running_kernels >= FAKE_KERNEL_SLOTS) return 0;
        fake_kernel_start(d, k);
        d->next_kernel = NULL;
        *progressed = 1;
    }
    if (fake_aborted(comm)) { /* NCCL's kernels poll the flag and quit, reporting nothing */
        fake_part *p;
        for (p = k->parts; p; p = p->next)
            if (p->kind == FAKE_SEND && p->message) fake_withdraw(comm, p);
    } else if (comm->injected != ncclSuccess || !fake_kernel_parts(k, progressed)) {
        fake_report_stuck(k); /* a broken communicator's kernels stall until it is aborted */
        return 0;
    }
    d->running_kernels--;
    comm->shared->completed++;
    comm->outstanding--;
    return 1;
}

/* 1: op is done. Host functions run with the lock released (*released set). */
static int fake_op_step(fake_device *d, cudaStream_t s, fake_op *op, int *progressed,
                        int *released)
{
    switch (op->kind) {
    case FAKE_OP_COPY: memmove(op->destination, op->source, op->bytes); return 1;
    case FAKE_OP_SET: memset(op->destination, op->value, op->bytes); return 1;
    case FAKE_OP_RECORD:
        op->event->completed = op->target, op->event->completed_ms = fake_now_ms();
        return 1;
    case FAKE_OP_WAIT: return op->event->completed >= op->target;
    case FAKE_OP_KERNEL: return fake_kernel_step(d, op, progressed);
    case FAKE_OP_HOST: {
        int failed;
        s->busy = 1, *released = 1;
        pthread_mutex_unlock(&fake_lock);
        failed = op->fn(op->arg) != 0;
        pthread_mutex_lock(&fake_lock);
        s->busy = 0;
        if (failed) {
            s->error = cudaErrorLaunchFailure;
            fake_violation(FAKE_PROTOCOL, "rank %d: a kernel (stand-in or grid) failed", d->rank);
        }
        return 1;
    }
    }
    return 1;
}

/* The kernel that may take the next free slot: of the kernels at the head of a stream whose
   communicator's earlier kernels are done, the one launched first. */
static const fake_op *fake_next_kernel(const fake_device *d)
{
    const struct fake_stream *s;
    const fake_op *best = NULL;
    for (s = d->streams; s; s = s->next_of_device) {
        const fake_op *k = s->head;
        if (!k || k->kind != FAKE_OP_KERNEL || k->started || s->busy ||
            k->ticket != k->comm->shared->completed)
            continue;
        if (!best || k->launched < best->launched) best = k;
    }
    return best;
}

/* One pass over the device's streams; 1 when anything moved. A stream destroyed with work
   pending goes once the work is done, as in CUDA. */
static int fake_device_step(fake_device *d)
{
    cudaStream_t *link = &d->streams;
    int progressed = 0;
    d->next_kernel = fake_next_kernel(d);
    while (*link) {
        cudaStream_t s = *link;
        while (s->head && !s->busy) {
            fake_op *op = s->head;
            int released = 0;
            if (!fake_op_step(d, s, op, &progressed, &released)) break;
            s->head = op->next;
            if (!s->head) s->tail = NULL;
            fake_op_free(op);
            progressed = 1;
            pthread_cond_broadcast(&fake_control);
            if (released) return 1; /* the stream list may have changed meanwhile */
        }
        if (s->destroyed && !s->head && !s->busy) {
            *link = s->next_of_device;
            free(s);
        } else
            link = &s->next_of_device;
    }
    return progressed;
}

static void *fake_device_main(void *arg)
{
    fake_device *d = (fake_device *)arg;
    pthread_mutex_lock(&fake_lock);
    while (!d->shutdown)
        if (!fake_device_step(d)) fake_wait_ms(&d->wake, FAKE_DEVICE_TICK_MS);
    pthread_mutex_unlock(&fake_lock);
    return NULL;
}

static int fake_start_thread(pthread_t *thread, void *(*main_fn)(void *), void *arg, int detached)
{
    pthread_attr_t attr;
    int failed;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, FAKE_THREAD_STACK_BYTES);
    if (detached) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    failed = pthread_create(thread, &attr, main_fn, arg) != 0;
    pthread_attr_destroy(&attr);
    if (failed) {
        fprintf(stderr, "fake_nccl: cannot start a thread\n");
        exit(1);
    }
    return 0;
}

/* --------------------------------------------------------------------- communicators */

static ncclResult_t fake_config_resolve(const ncclConfig_t *given, ncclConfig_t *out)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    if (given) {
        if (given->magic != NCCL_CONFIG_MAGIC) {
            fake_violation(FAKE_PROTOCOL, "a config not initialised with NCCL_CONFIG_INITIALIZER");
            return ncclInvalidArgument;
        }
        c = *given;
    }
    if (c.blocking == NCCL_CONFIG_UNDEF_INT) c.blocking = FAKE_DEFAULT_BLOCKING;
    if (c.cgaClusterSize == NCCL_CONFIG_UNDEF_INT) c.cgaClusterSize = FAKE_DEFAULT_CGA_CLUSTER;
    if (c.minCTAs == NCCL_CONFIG_UNDEF_INT) c.minCTAs = FAKE_DEFAULT_MIN_CTAS;
    if (c.maxCTAs == NCCL_CONFIG_UNDEF_INT) c.maxCTAs = FAKE_DEFAULT_MAX_CTAS;
    if (c.splitShare == NCCL_CONFIG_UNDEF_INT) c.splitShare = FAKE_DEFAULT_SPLIT_SHARE;
    if ((c.blocking != 0 && c.blocking != 1) || (c.splitShare != 0 && c.splitShare != 1)) {
        fake_violation(FAKE_PROTOCOL, "config blocking %d / splitShare %d", c.blocking,
                       c.splitShare);
        return ncclInvalidArgument;
    }
    *out = c;
    return ncclSuccess;
}

/* With fake_lock held (or before the rank threads start). */
static fake_group *fake_group_new(int size)
{
    fake_group *g = (fake_group *)calloc(1, sizeof *g);
    g->size = size;
    g->members = (ncclComm_t *)calloc((size_t)size, sizeof(ncclComm_t));
    g->channels = (fake_channel **)calloc((size_t)size, sizeof(fake_channel *));
    g->ring_ready = (unsigned char *)calloc((size_t)size, 1);
    g->next_of_job = fake_groups;
    fake_groups = g;
    return g;
}

/* shared: the parent's under splitShare, else NULL for resources of its own. */
static ncclComm_t fake_comm_new(fake_group *group, int rank, fake_device *device,
                                const ncclConfig_t *config, fake_shared *shared)
{
    ncclComm_t c = (ncclComm_t)calloc(1, sizeof *c);
    c->group = group, c->rank = rank, c->device = device, c->config = *config;
    if (!shared) {
        shared = (fake_shared *)calloc(1, sizeof *shared);
        shared->next_of_job = fake_shareds;
        fake_shareds = shared;
    }
    c->shared = shared;
    c->state = c->injected = ncclSuccess;
    group->members[rank] = c;
    c->next_of_job = fake_comms;
    fake_comms = c;
    return c;
}

/* Marks a communicator a rank made (not the test's job): fake_comm_tally counts them. */
static ncclComm_t fake_comm_made(ncclComm_t comm)
{
    comm->made = 1;
    return comm;
}

/* With fake_lock held: a usable communicator, or a violation naming the call. */
static int fake_comm_alive(const ncclComm_t comm, const char *call)
{
    if (!comm->dead) return 1;
    fake_violation(FAKE_PROTOCOL, "rank %d: %s on a destroyed or aborted communicator",
                   comm->rank, call);
    return 0;
}

/* ... and, for a call that starts new work, one whose previous non-blocking call is done
   (NCCL's ncclCommEnsureReady: "Attempt to use communicator before the previous operation
   returned ncclSuccess"). */
static int fake_comm_ready(const ncclComm_t comm, const char *call)
{
    if (!fake_comm_alive(comm, call)) return 0;
    if (comm->jobs == 0 && comm->state != ncclInProgress) return 1;
    fake_violation(FAKE_PROTOCOL, "rank %d: %s on a communicator whose previous operation is "
                   "still in progress", comm->rank, call);
    return 0;
}

/* -- connections: a first use of a peer (and a first collective) connects both sides, each
   side in its own rank's ncclGroupEnd; the kernel may launch once every link it uses has
   both. */

static void fake_connect_sides(const fake_op *k)
{
    fake_group *g = k->comm->group;
    const int me = k->comm->rank;
    const fake_part *p;
    for (p = k->parts; p; p = p->next) {
        if (p->kind == FAKE_SEND) fake_channel_of(g, me, p->peer)->link |= FAKE_LINK_SEND;
        else if (p->kind == FAKE_RECV) fake_channel_of(g, p->peer, me)->link |= FAKE_LINK_RECV;
        else if (!g->ring_ready[me]) g->ring_ready[me] = 1, g->ring_members++;
    }
    pthread_cond_broadcast(&fake_control);
}

/* 1: every link the kernel uses has both sides; -1: a peer it needs has destroyed or aborted
   its communicator (NCCL's connection attempt then fails: ncclRemoteError); 0: not yet. */
static int fake_connected(const fake_op *k)
{
    fake_group *g = k->comm->group;
    const int me = k->comm->rank;
    const fake_part *p;
    int r;
    for (p = k->parts; p; p = p->next) {
        if (p->kind == FAKE_SEND && fake_channel_of(g, me, p->peer)->link != FAKE_LINKED)
            return g->members[p->peer] && g->members[p->peer]->dead ? -1 : 0;
        if (p->kind == FAKE_RECV && fake_channel_of(g, p->peer, me)->link != FAKE_LINKED)
            return g->members[p->peer] && g->members[p->peer]->dead ? -1 : 0;
        if ((p->kind == FAKE_ALLREDUCE || p->kind == FAKE_BROADCAST) && g->ring_members < g->size) {
            for (r = 0; r < g->size; r++)
                if (!g->ring_ready[r] && g->members[r] && g->members[r]->dead) return -1;
            return 0;
        }
    }
    return 1;
}

/* The kernels of one group end (a list through next): 1 when all may launch now (an aborted
   communicator's too: they quit when they run), -1 when one cannot connect or queue (its own
   communicator or a peer's was aborted), 0 while a peer has not connected or a queue is
   full. */
static int fake_launchable(const void *arg)
{
    const fake_op *k;
    for (k = (const fake_op *)arg; k; k = k->next) {
        const int connected = fake_connected(k);
        if (k->comm->dead || connected < 0) return -1;
        if (!connected || k->comm->outstanding >= FAKE_WORK_FIFO)
            return fake_aborted(k->comm) ? -1 : 0;
    }
    return 1;
}

static void fake_launch(fake_op *kernels)
{
    while (kernels) {
        fake_op *k = kernels;
        kernels = k->next;
        k->ticket = k->comm->shared->issued++;
        k->launched = k->comm->device->launches++;
        k->comm->outstanding++;
        fake_append(k->stream, k);
    }
}

static void fake_drop(fake_op *kernels)
{
    while (kernels) {
        fake_op *k = kernels;
        kernels = k->next;
        fake_op_free(k);
    }
}

/* -- background jobs of non-blocking communicators: one thread per job, the communicator in
   progress until it ends */

typedef enum { FAKE_JOB_SPLIT, FAKE_JOB_LAUNCH, FAKE_JOB_FINALIZE } fake_job_kind;

typedef struct fake_job {
    fake_job_kind kind;
    ncclComm_t comm;     /* the one whose wait ends it when aborted */
    ncclComm_t *comms;   /* every communicator it keeps in progress */
    int num_comms;
    pthread_t thread;
    fake_split *split;   /* split */
    int color;
    ncclConfig_t child_config;
    ncclComm_t *newcomm;
    fake_op *kernels;    /* launch */
} fake_job;

static int fake_live_jobs, fake_stopping;

static void fake_job_end(fake_job *job, ncclResult_t result)
{
    int i;
    for (i = 0; i < job->num_comms; i++) {
        ncclComm_t comm = job->comms[i];
        if (--comm->jobs == 0 && comm->state == ncclInProgress) comm->state = result;
        else if (result != ncclSuccess) comm->state = result;
    }
    fake_live_jobs--;
    pthread_cond_broadcast(&fake_control);
}

/* A job's wait: NCCL's background thread has no bound; it ends when its communicator is
   aborted (or the test's job ends). */
static int fake_job_wait(int (*ready)(const void *), const void *arg, const ncclComm_t comm)
{
    for (;;) {
        const int r = ready(arg);
        if (r != 0) return r;
        if (fake_aborted(comm)) return -1;
        if (fake_stopping) {
            fake_violation(FAKE_PROTOCOL, "rank %d: a non-blocking operation was still in "
                           "progress when the job ended (never polled to its end nor aborted)",
                           comm->rank);
            return -1;
        }
        fake_wait_ms(&fake_control, FAKE_WAIT_SLICE_MS);
    }
}

static ncclComm_t fake_split_child(ncclComm_t parent, fake_split *s, int color,
                                   const ncclConfig_t *config);
static ncclComm_t fake_split_failed(ncclComm_t parent, int color, const ncclConfig_t *config,
                                    ncclResult_t error);
static void fake_raise_abort(ncclComm_t comm);
static int fake_split_complete(const void *arg);
static int fake_drained(const void *arg);

static void *fake_job_main(void *arg)
{
    fake_job *job = (fake_job *)arg;
    ncclResult_t result = ncclSuccess;
    pthread_mutex_lock(&fake_lock);
    switch (job->kind) {
    case FAKE_JOB_SPLIT: /* *newcomm is the caller's memory, written when the job ends */
        if (fake_job_wait(fake_split_complete, job->split, job->comm) > 0)
            *job->newcomm = fake_split_child(job->comm, job->split, job->color,
                                             &job->child_config);
        else {
            result = ncclRemoteError;
            *job->newcomm = fake_split_failed(job->comm, job->color, &job->child_config, result);
        }
        break;
    case FAKE_JOB_LAUNCH:
        if (fake_job_wait(fake_launchable, job->kernels, job->comm) > 0)
            fake_launch(job->kernels);
        else {
            fake_drop(job->kernels);
            result = ncclRemoteError;
        }
        break;
    case FAKE_JOB_FINALIZE:
        if (fake_job_wait(fake_drained, job->comm, job->comm) <= 0) result = ncclInternalError;
        break;
    }
    fake_job_end(job, result);
    pthread_mutex_unlock(&fake_lock);
    free(job->comms), free(job);
    return NULL;
}

/* With fake_lock held: the job runs in a thread of its own; its communicators (comm, or every
   communicator of its kernels) are in progress until it ends. */
static ncclResult_t fake_job_start(fake_job *job)
{
    const fake_op *k;
    int i;
    job->comms = (ncclComm_t *)malloc(sizeof(ncclComm_t));
    job->comms[0] = job->comm, job->num_comms = 1;
    for (k = job->kernels; k; k = k->next) {
        for (i = 0; i < job->num_comms && job->comms[i] != k->comm; i++) {
        }
        if (i < job->num_comms) continue;
        job->comms = (ncclComm_t *)realloc(job->comms, (size_t)(i + 1) * sizeof(ncclComm_t));
        job->comms[job->num_comms++] = k->comm;
    }
    for (i = 0; i < job->num_comms; i++)
        job->comms[i]->jobs++, job->comms[i]->state = ncclInProgress;
    fake_live_jobs++;
    fake_start_thread(&job->thread, fake_job_main, job, 1);
    return ncclInProgress;
}

/* -- splits: collective over the parent; the child exists once every member has come */

enum { FAKE_JOINED = 1, FAKE_EXCLUDED = 2 };

/* comm joins its communicator's next split (its own count of splits names it), of which
   `members` ranks of the parent take part: a shrink leaves out excluded[0 .. count). */
static fake_split *fake_split_join(ncclComm_t comm, int color, int key, int members,
                                   const int *excluded, int count)
{
    fake_group *g = comm->group;
    fake_split *s;
    int r;
    for (s = g->splits; s && s->sequence != comm->splits; s = s->next) {
    }
    if (!s) {
        s = (fake_split *)calloc(1, sizeof *s);
        s->sequence = comm->splits, s->size = members;
        s->color = (int *)malloc((size_t)g->size * sizeof(int));
        s->key = (int *)malloc((size_t)g->size * sizeof(int));
        for (r = 0; r < g->size; r++) s->color[r] = NCCL_SPLIT_NOCOLOR, s->key[r] = 0;
        s->joined = (unsigned char *)calloc((size_t)g->size, 1);
        for (r = 0; r < count; r++) s->joined[excluded[r]] = FAKE_EXCLUDED;
        s->parent = g;
        s->child = (fake_group **)calloc((size_t)g->size, sizeof(fake_group *));
        s->next = g->splits;
        g->splits = s;
    }
    if (s->size != members)
        fake_violation(FAKE_PROTOCOL, "rank %d: split %lu of %d members joined as one of %d (a "
                       "split and a shrink, or shrinks of different lists, at once)",
                       comm->rank, s->sequence, s->size, members);
    comm->splits++;
    s->joined[comm->rank] = FAKE_JOINED;
    s->color[comm->rank] = color, s->key[comm->rank] = key;
    s->deposited++;
    pthread_cond_broadcast(&fake_control);
    return s;
}

/* Every member came (1); a member aborted its parent first (-1: NCCL's bootstrap finds its
   socket closed); 0 while one is missing (NCCL's bootstrap waits for it, without bound). */
static int fake_split_complete(const void *arg)
{
    const fake_split *s = (const fake_split *)arg;
    int r;
    if (s->broken) return -1;
    if (s->deposited == s->size) return 1;
    for (r = 0; r < s->parent->size; r++) /* a member it waits for is gone: NCCL's bootstrap
                                              finds its socket closed */
        if (!s->joined[r] && s->parent->members[r] && s->parent->members[r]->dead) return -1;
    return 0;
}

/* With fake_lock held: this member's child of its split (NULL for NCCL_SPLIT_NOCOLOR), ranked
   by key then parent rank; under the parent's splitShare it shares the parent's resources. */
static ncclComm_t fake_split_child(ncclComm_t parent, fake_split *s, int color,
                                   const ncclConfig_t *config)
{
    fake_group *g = parent->group;
    const int me = parent->rank;
    int r, members = 0, index = 0;
    if (color == NCCL_SPLIT_NOCOLOR) return NULL;
    for (r = 0; r < g->size; r++)
        if (s->color[r] == color) {
            members++;
            if (s->key[r] < s->key[me] || (s->key[r] == s->key[me] && r < me)) index++;
        }
    if (!s->child[me]) {
        fake_group *child = fake_group_new(members);
        for (r = 0; r < g->size; r++)
            if (s->color[r] == color) s->child[r] = child;
    }
    parent->device->comms_made++;
    return fake_comm_made(fake_comm_new(s->child[me], index, parent->device, config,
                                        parent->config.splitShare ? parent->shared : NULL));
}

/* What NCCL does when a split's group job fails (src/init.cc ncclCommInitRankFunc,
   src/group.cc asyncJobLaunch): the child is written all the same, its init state the error,
   and the failed job raises the PARENT's abort flag, so that the parent's kernels quit. With
   fake_lock held. */
static ncclComm_t fake_split_failed(ncclComm_t parent, int color, const ncclConfig_t *config,
                                    ncclResult_t error)
{
    ncclComm_t child;
    fake_raise_abort(parent);
    if (color == NCCL_SPLIT_NOCOLOR) return NULL; /* NCCL made no child */
    child = fake_comm_made(fake_comm_new(fake_group_new(1), 0, parent->device, config, NULL));
    child->state = error;
    parent->device->comms_made++;
    return child;
}

/* Predicates of host waits and jobs (fake_lock held). */
static int fake_drained(const void *arg)
{
    return ((const struct fake_comm *)arg)->outstanding == 0;
}
static int fake_quiet(const void *arg)
{
    const struct fake_comm *c = (const struct fake_comm *)arg;
    return c->jobs == 0 && c->outstanding == 0;
}
static int fake_stream_idle(const void *arg)
{
    return ((const struct fake_stream *)arg)->head == NULL;
}
static int fake_stream_free(const void *arg) { return !((const struct fake_stream *)arg)->busy; }

/* ------------------------------------------------------------------------- CUDA runtime */

#ifndef FAKE_NCCL_CUDA_RUNTIME /* else tests/cuda_cpu/device.cc's */
const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
    }
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0, *greatest = -5;
    return cudaSuccess;
}
#endif
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority)
{
    fake_device *d = fake_current_device("cudaStreamCreate");
    (void)priority;
    if (!stream || !d) return cudaErrorInvalidValue;
    *stream = (cudaStream_t)calloc(1, sizeof **stream);
    (*stream)->device = d, (*stream)->flags = flags;
    pthread_mutex_lock(&fake_lock);
    (*stream)->next_of_device = d->streams;
    d->streams = *stream;
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    return cudaStreamCreateWithPriority(stream, flags, 0);
}
/* A stream with work pending is a violation here (its work then runs later, when the caller's
   buffers may be gone); the device still runs it, as CUDA would, and frees the stream after. */
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaStream_t *link;
    if (!stream) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    (void)fake_block_host(fake_stream_free, stream, stream->device->rank, "cudaStreamDestroy");
    if (stream->head) {
        fake_violation(FAKE_PROTOCOL, "rank %d: a stream destroyed with work pending",
                       stream->device->rank);
        stream->destroyed = 1;
        pthread_mutex_unlock(&fake_lock);
        return cudaSuccess;
    }
    for (link = &stream->device->streams; *link != stream; link = &(*link)->next_of_device) {
    }
    *link = stream->next_of_device;
    pthread_mutex_unlock(&fake_lock);
    free(stream);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t error;
    int idle;
    stream = fake_stream_or_legacy(stream, "cudaStreamQuery");
    if (!stream) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    idle = stream->head == NULL, error = stream->error;
    pthread_mutex_unlock(&fake_lock);
    if (idle || error != cudaSuccess) return error;
    {
        struct timespec pause = {0, FAKE_NOT_READY_PAUSE_NS};
        nanosleep(&pause, NULL);
    }
    return cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t error;
    int r;
    stream = fake_stream_or_legacy(stream, "cudaStreamSynchronize");
    if (!stream) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    r = fake_block_host(fake_stream_idle, stream, stream->device->rank, "cudaStreamSynchronize");
    error = r > 0 ? stream->error : cudaErrorUnknown;
    pthread_mutex_unlock(&fake_lock);
    return error;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    fake_op *op;
    (void)flags;
    stream = fake_stream_or_legacy(stream, "cudaStreamWaitEvent");
    if (!event || !stream) return cudaErrorInvalidValue;
    op = fake_op_new(FAKE_OP_WAIT);
    pthread_mutex_lock(&fake_lock);
    op->event = event, op->target = event->recorded;
    fake_append(stream, op);
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    fake_device *d = fake_current_device("cudaEventCreate");
    (void)flags;
    if (!event || !d) return cudaErrorInvalidValue;
    *event = (cudaEvent_t)calloc(1, sizeof **event);
    (*event)->device = d;
    return cudaSuccess;
}
/* Kept until the job ends: an op that still names it stays valid. */
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (!event) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    event->next_dead = fake_dead_events;
    fake_dead_events = event;
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    fake_op *op;
    stream = fake_stream_or_legacy(stream, "cudaEventRecord");
    if (!event || !stream) return cudaErrorInvalidValue;
    if (event->device != stream->device) {
        fake_violation(FAKE_PROTOCOL, "an event recorded on another device's stream");
        return cudaErrorInvalidValue;
    }
    op = fake_op_new(FAKE_OP_RECORD);
    pthread_mutex_lock(&fake_lock);
    op->event = event, op->target = ++event->recorded;
    fake_append(stream, op);
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event)
{
    int passed;
    if (!event) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    passed = event->completed >= event->recorded;
    pthread_mutex_unlock(&fake_lock);
    return passed ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaMalloc(void **pointer, size_t bytes)
{
    return fake_register(pointer, bytes, 0, "cudaMalloc");
}
cudaError_t cudaFree(void *pointer) { return fake_unregister(pointer, 0, "cudaFree"); }
cudaError_t cudaMallocHost(void **pointer, size_t bytes)
{
    return fake_register(pointer, bytes, 1, "cudaMallocHost");
}
cudaError_t cudaFreeHost(void *pointer) { return fake_unregister(pointer, 1, "cudaFreeHost"); }

static const char *fake_memory_name(fake_memory m)
{
    return m == FAKE_DEVICE_MEMORY ? "device" : m == FAKE_PINNED ? "pinned" : "pageable";
}

/* Whether kind matches what the two pointers are (cudaMemcpyDefault: anything goes). */
static int fake_kind_fits(cudaMemcpyKind kind, fake_memory from, fake_memory to)
{
    const int from_device = from == FAKE_DEVICE_MEMORY, to_device = to == FAKE_DEVICE_MEMORY;
    switch (kind) {
    case cudaMemcpyHostToHost: return !from_device && !to_device;
    case cudaMemcpyHostToDevice: return !from_device && to_device;
    case cudaMemcpyDeviceToHost: return from_device && !to_device;
    case cudaMemcpyDeviceToDevice: return from_device && to_device;
    case cudaMemcpyDefault: return 1;
    }
    return 0;
}

cudaError_t cudaMemcpyAsync(void *destination, const void *source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream)
{
    fake_memory from, to;
    fake_op *op;
    stream = fake_stream_or_legacy(stream, "cudaMemcpyAsync");
    if (!stream || (bytes > 0 && (!destination || !source))) return cudaErrorInvalidValue;
    if (bytes == 0) return cudaSuccess;
    pthread_mutex_lock(&fake_lock);
    from = fake_memory_of(stream->device, source, bytes);
    to = fake_memory_of(stream->device, destination, bytes);
    if (!fake_kind_fits(kind, from, to)) {
        pthread_mutex_unlock(&fake_lock);
        fake_violation(FAKE_PROTOCOL, "rank %d: cudaMemcpyAsync of kind %d from %s to %s memory",
                       stream->device->rank, (int)kind, fake_memory_name(from),
                       fake_memory_name(to));
        return cudaErrorInvalidValue;
    }
    if (from == FAKE_PAGEABLE || to == FAKE_PAGEABLE) { /* staged: synchronous with the stream */
        const int r = fake_block_host(fake_stream_idle, stream, stream->device->rank,
                                      "cudaMemcpyAsync to or from pageable memory (it waits for "
                                      "the stream)");
        if (r > 0) memmove(destination, source, bytes);
        pthread_mutex_unlock(&fake_lock);
        return r > 0 ? cudaSuccess : cudaErrorUnknown;
    }
    op = fake_op_new(FAKE_OP_COPY);
    op->destination = destination, op->source = source, op->bytes = bytes;
    fake_append(stream, op);
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *destination, int value, size_t bytes, cudaStream_t stream)
{
    fake_op *op;
    stream = fake_stream_or_legacy(stream, "cudaMemsetAsync");
    if (!stream) return cudaErrorInvalidValue;
    if (bytes == 0) return cudaSuccess;
    pthread_mutex_lock(&fake_lock);
    if (fake_memory_of(stream->device, destination, bytes) != FAKE_DEVICE_MEMORY) {
        pthread_mutex_unlock(&fake_lock);
        fake_violation(FAKE_PROTOCOL, "rank %d: cudaMemsetAsync of memory that is not the "
                       "device's", stream->device->rank);
        return cudaErrorInvalidValue;
    }
    op = fake_op_new(FAKE_OP_SET);
    op->destination = destination, op->value = value, op->bytes = bytes;
    fake_append(stream, op);
    pthread_mutex_unlock(&fake_lock);
    return cudaSuccess;
}

#ifdef FAKE_NCCL_CUDA_RUNTIME
/* The rest of the runtime the model's programs use on these devices. */

/* Whether a synchronous call waits for stream s: cudaDeviceSynchronize for all, the legacy
   stream's calls not for cudaStreamNonBlocking streams. */
static int fake_waits_for(const struct fake_stream *s, int legacy)
{
    return !legacy || !(s->flags & cudaStreamNonBlocking);
}

static int fake_streams_idle(const fake_device *d, int legacy)
{
    const struct fake_stream *s;
    for (s = d->streams; s; s = s->next_of_device)
        if (fake_waits_for(s, legacy) && (s->head || s->busy)) return 0;
    return 1;
}
static int fake_device_idle(const void *arg)
{
    return fake_streams_idle((const fake_device *)arg, 0);
}
static int fake_legacy_idle(const void *arg)
{
    return fake_streams_idle((const fake_device *)arg, 1);
}

/* Blocks until the streams a synchronous call waits for are done; the first error of those
   streams, or of a hang. */
static cudaError_t fake_device_wait(int legacy, const char *call)
{
    fake_device *d = fake_current_device(call);
    const struct fake_stream *s;
    cudaError_t error = cudaSuccess;
    if (!d) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    if (fake_block_host(legacy ? fake_legacy_idle : fake_device_idle, d, d->rank, call) <= 0)
        error = cudaErrorUnknown;
    for (s = d->streams; s && error == cudaSuccess; s = s->next_of_device)
        if (fake_waits_for(s, legacy)) error = s->error;
    pthread_mutex_unlock(&fake_lock);
    return error;
}

cudaError_t cudaDeviceSynchronize(void)
{
    return fake_device_wait(0, "cudaDeviceSynchronize");
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithPriority(stream, 0, 0);
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

static int fake_event_passed(const void *arg)
{
    const struct fake_event *e = (const struct fake_event *)arg;
    return e->completed >= e->recorded;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    int r;
    if (!event) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    r = fake_block_host(fake_event_passed, event, event->device->rank, "cudaEventSynchronize");
    pthread_mutex_unlock(&fake_lock);
    return r > 0 ? cudaSuccess : cudaErrorUnknown;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t error = cudaSuccess;
    if (!ms || !start || !end) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    if (!start->recorded || !end->recorded || !fake_event_passed(start) || !fake_event_passed(end))
        error = cudaErrorNotReady;
    else
        *ms = (float)(end->completed_ms - start->completed_ms);
    pthread_mutex_unlock(&fake_lock);
    return error;
}

/* The synchronous copy and set: on the legacy stream, the host waiting before and after. */
cudaError_t cudaMemcpy(void *destination, const void *source, size_t bytes, cudaMemcpyKind kind)
{
    cudaError_t error = fake_device_wait(1, "cudaMemcpy");
    if (error == cudaSuccess) error = cudaMemcpyAsync(destination, source, bytes, kind, NULL);
    return error == cudaSuccess ? fake_device_wait(1, "cudaMemcpy") : error;
}

cudaError_t cudaMemset(void *destination, int value, size_t bytes)
{
    cudaError_t error = fake_device_wait(1, "cudaMemset");
    if (error == cudaSuccess) error = cudaMemsetAsync(destination, value, bytes, NULL);
    return error == cudaSuccess ? fake_device_wait(1, "cudaMemset") : error;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    fake_device *d = fake_current_device("cudaMemGetInfo");
    const fake_block *b;
    size_t used = 0;
    if (!d) return cudaErrorInvalidValue;
    pthread_mutex_lock(&fake_lock);
    for (b = d->blocks; b; b = b->next)
        if (!b->pinned) used += b->bytes;
    pthread_mutex_unlock(&fake_lock);
    if (free_bytes)
        *free_bytes = used < FAKE_DEVICE_MEMORY_BYTES ? FAKE_DEVICE_MEMORY_BYTES - used : 0;
    if (total) *total = FAKE_DEVICE_MEMORY_BYTES;
    return cudaSuccess;
}

/* A kernel launch of the execution model: its grid, run by the device thread at its turn. A
   device fault while it ran (a checker report, a trap) is the stream's sticky error. */
typedef struct fake_host_call {
    cudaHostFn_t fn;
    void *data;
} fake_host_call;

static int fake_run_host_call(void *arg)
{
    const fake_host_call *call = (const fake_host_call *)arg;
    const uint64_t faults = dcp_cuda_cpu_faults();
    call->fn(call->data);
    return dcp_cuda_cpu_faults() != faults;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *data)
{
    fake_host_call *call;
    if (!fn) return cudaErrorInvalidValue;
    call = (fake_host_call *)malloc(sizeof *call);
    if (!call) return cudaErrorMemoryAllocation;
    call->fn = fn, call->data = data;
    return fake_enqueue_host(stream, fake_run_host_call, call);
}
#endif /* FAKE_NCCL_CUDA_RUNTIME */

/* ----------------------------------------------------------------------------------- NCCL */

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unhandled cuda error";
    }
}
const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return "";
}
ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(ncclComm_t comm, int *count)
{
    int alive;
    if (!comm || !count) return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    alive = fake_comm_alive(comm, "ncclCommCount");
    *count = comm->group->size;
    pthread_mutex_unlock(&fake_lock);
    return alive ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank)
{
    int alive;
    if (!comm || !rank) return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    alive = fake_comm_alive(comm, "ncclCommUserRank");
    *rank = comm->rank;
    pthread_mutex_unlock(&fake_lock);
    return alive ? ncclSuccess : ncclInvalidArgument;
}

/* The calling thread's open group: kernels being built (one per communicator and stream) and
   the aborts whose waits ncclGroupEnd makes. */
typedef struct fake_abort_node {
    struct fake_abort_node *next;
    ncclComm_t comm;
} fake_abort_node;
static __thread int fake_group_depth;
static __thread fake_op *fake_group_kernels;
static __thread fake_abort_node *fake_group_aborts;
static __thread int fake_group_failed; /* a call of the open group failed (ncclGroupError) */

/* With fake_lock held: after the flag, ncclCommAbort waits for the communicator's background
   thread and queued kernels (NCCL's commReclaim synchronises its internal stream, which waits
   for the user streams those kernels sit on). */
static void fake_reclaim(ncclComm_t comm)
{
    (void)fake_block_host(fake_quiet, comm, comm->rank,
                          "ncclCommAbort, waiting for the communicator's queued work (queued "
                          "behind other work that no abort has released yet?)");
    comm->dead = 1;
}

static void fake_raise_abort(ncclComm_t comm)
{
    fake_split *s;
    comm->shared->abort = 1;
    for (s = comm->group->splits; s; s = s->next)
        if (s->deposited < s->size) s->broken = 1;
    fake_wake_all();
}

/* With fake_lock held: launches the kernels of a group end, or hands them to a background job
   (non-blocking communicators whose peers have not connected yet). */
static ncclResult_t fake_group_launch(fake_op *kernels)
{
    fake_op *k;
    int blocking = -1, r;
    for (k = kernels; k; k = k->next) {
        if (!fake_comm_ready(k->comm, "ncclGroupEnd")) break;
        if (blocking >= 0 && blocking != k->comm->config.blocking) {
            fake_violation(FAKE_PROTOCOL, "blocking and non-blocking communicators in one group");
            break;
        }
        blocking = k->comm->config.blocking;
    }
    if (k) {
        fake_drop(kernels);
        return ncclInvalidArgument;
    }
    for (k = kernels; k; k = k->next) fake_connect_sides(k);
    r = fake_launchable(kernels);
    if (r == 0 && !blocking) {
        fake_job *job = (fake_job *)calloc(1, sizeof *job);
        job->kind = FAKE_JOB_LAUNCH, job->comm = kernels->comm, job->kernels = kernels;
        return fake_job_start(job);
    }
    if (r == 0)
        r = fake_block_host(fake_launchable, kernels, kernels->comm->rank,
                            "ncclGroupEnd (a first use of a peer that has not connected, or a "
                            "full work queue)");
    if (r > 0) {
        fake_launch(kernels);
        return ncclSuccess;
    }
    fake_drop(kernels);
    return r < 0 ? ncclRemoteError : ncclSystemError;
}

/* The end of the outermost group: the aborts' waits, then the kernels' launch, unless a call
   of the group failed: then, as NCCL does, nothing launches and the group reports the error. */
static ncclResult_t fake_group_flush(void)
{
    fake_op *kernels = fake_group_kernels;
    fake_abort_node *aborts = fake_group_aborts;
    ncclResult_t result = fake_group_failed ? ncclSystemError : ncclSuccess;
    fake_group_kernels = NULL, fake_group_aborts = NULL, fake_group_failed = 0;
    pthread_mutex_lock(&fake_lock);
    while (aborts) { /* every flag is up already: now the waits */
        fake_abort_node *node = aborts;
        aborts = node->next;
        fake_reclaim(node->comm);
        free(node);
    }
    if (result != ncclSuccess) fake_drop(kernels);
    else if (kernels) result = fake_group_launch(kernels);
    pthread_mutex_unlock(&fake_lock);
    return result;
}

ncclResult_t ncclGroupStart(void)
{
    fake_group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void)
{
    if (fake_group_depth == 0) return ncclInvalidUsage; /* NCCL: "not in a group call" */
    if (--fake_group_depth > 0) return ncclSuccess;
    return fake_group_flush();
}

/* The kernel of the open group for (comm, stream), created on first use. */
static fake_op *fake_group_kernel(ncclComm_t comm, cudaStream_t stream)
{
    fake_op *k;
    for (k = fake_group_kernels; k; k = k->next)
        if (k->comm == comm && k->stream == stream) return k;
    k = fake_op_new(FAKE_OP_KERNEL);
    k->comm = comm, k->stream = stream;
    k->next = fake_group_kernels;
    fake_group_kernels = k;
    return k;
}

/* Whether a part's buffers are the communicator's device memory (with fake_lock held). */
static int fake_part_buffers_fit(const ncclComm_t comm, const fake_part *p)
{
    if (p->bytes == 0) return 1;
    if (p->kind != FAKE_RECV &&
        fake_memory_of(comm->device, p->source, p->bytes) != FAKE_DEVICE_MEMORY)
        return 0;
    return p->kind == FAKE_SEND ||
           fake_memory_of(comm->device, p->destination, p->bytes) == FAKE_DEVICE_MEMORY;
}

/* An NCCL call: checked as NCCL checks it, then a part of the open group's kernel (outside a
   group, a group of its own). */
static ncclResult_t fake_call(fake_part *part, ncclComm_t comm, cudaStream_t stream,
                              const char *call)
{
    int ok;
    stream = fake_stream_or_legacy(stream, call);
    if (!stream) {
        free(part);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&fake_lock);
    ok = fake_comm_ready(comm, call);
    if (ok && comm->finalized) {
        fake_violation(FAKE_PROTOCOL, "rank %d: %s after ncclCommFinalize", comm->rank, call);
        ok = 0;
    }
    if (ok && stream->device != comm->device) {
        fake_violation(FAKE_PROTOCOL, "rank %d: %s on another device's stream", comm->rank, call);
        ok = 0;
    }
    if (ok && !fake_part_buffers_fit(comm, part)) {
        fake_violation(FAKE_PROTOCOL, "rank %d: %s of %zu bytes outside the device's memory",
                       comm->rank, call, part->bytes);
        ok = 0;
    }
    if (ok && part->kind != FAKE_SEND && part->kind != FAKE_RECV)
        part->sequence = comm->collectives++;
    pthread_mutex_unlock(&fake_lock);
    if (!ok) {
        free(part);
        return ncclInvalidArgument;
    }
    {
        fake_op *k = fake_group_kernel(comm, stream);
        *k->parts_tail = part;
        k->parts_tail = &part->next;
    }
    return fake_group_depth > 0 ? ncclSuccess : fake_group_flush();
}

static ncclResult_t fake_point_to_point(fake_part_kind kind, void *data, size_t count,
                                        ncclDataType_t type, int peer, ncclComm_t comm,
                                        cudaStream_t stream, const char *call)
{
    fake_part *p;
    if (!comm || peer < 0 || peer >= comm->group->size || !fake_type_size(type))
        return ncclInvalidArgument;
    p = (fake_part *)calloc(1, sizeof *p);
    p->kind = kind, p->peer = peer, p->bytes = count * fake_type_size(type);
    p->source = data, p->destination = data;
    return fake_call(p, comm, stream, call);
}
ncclResult_t ncclSend(const void *data, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return fake_point_to_point(FAKE_SEND, (void *)(uintptr_t)data, count, type, peer, comm,
                               stream, "ncclSend");
}
ncclResult_t ncclRecv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return fake_point_to_point(FAKE_RECV, data, count, type, peer, comm, stream, "ncclRecv");
}
static ncclResult_t fake_collective_call(fake_part_kind kind, const void *send, void *receive,
                                         size_t count, ncclDataType_t type,
                                         ncclRedOp_t reduction, int root, ncclComm_t comm,
                                         cudaStream_t stream, const char *call)
{
    fake_part *p;
    if (!comm || !fake_type_size(type) || root < 0 || root >= comm->group->size)
        return ncclInvalidArgument;
    p = (fake_part *)calloc(1, sizeof *p);
    p->kind = kind, p->source = send, p->destination = receive, p->count = count;
    p->bytes = count * fake_type_size(type);
    p->type = type, p->reduction = reduction, p->root = root;
    return fake_call(p, comm, stream, call);
}
ncclResult_t ncclAllReduce(const void *send, void *receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return fake_collective_call(FAKE_ALLREDUCE, send, receive, count, type, op, 0, comm, stream,
                                "ncclAllReduce");
}
ncclResult_t ncclBroadcast(const void *send, void *receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return fake_collective_call(FAKE_BROADCAST, send, receive, count, type, ncclSum, root, comm,
                                stream, "ncclBroadcast");
}

/* The rest of a split (or shrink) once comm has joined s: the PARENT's mode decides whether
   it is the parent's group job (non-blocking) or blocks the host until every member came;
   either way a failure writes the child with its error and raises the parent's abort flag
   (fake_split_failed). With fake_lock held. */
static ncclResult_t fake_split_run(ncclComm_t comm, fake_split *s, int color,
                                   const ncclConfig_t *child_config, ncclComm_t *newcomm,
                                   const char *call)
{
    char what[96];
    int r;
    if (!comm->config.blocking) {
        fake_job *job = (fake_job *)calloc(1, sizeof *job);
        job->kind = FAKE_JOB_SPLIT, job->comm = comm, job->split = s, job->color = color;
        job->child_config = *child_config, job->newcomm = newcomm;
        return fake_job_start(job);
    }
    snprintf(what, sizeof what, "%s (a rank of the parent has not called it)", call);
    r = fake_block_host(fake_split_complete, s, comm->rank, what);
    if (r > 0) {
        *newcomm = fake_split_child(comm, s, color, child_config);
        return ncclSuccess;
    }
    if (r == 0) return ncclSystemError; /* the transport's bound: NCCL would wait forever */
    *newcomm = fake_split_failed(comm, color, child_config, ncclRemoteError);
    return ncclRemoteError;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    ncclConfig_t child_config;
    ncclResult_t result = ncclSuccess;
    fake_split *s;
    if (!comm || !newcomm || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    if (!fake_comm_ready(comm, "ncclCommSplit")) {
        pthread_mutex_unlock(&fake_lock);
        return ncclInvalidArgument;
    }
    *newcomm = NULL; /* until the split completes */
    if (config) result = fake_config_resolve(config, &child_config);
    else child_config = comm->config; /* NULL: the parent's (NCCL's copyCommConfig) */
    if (result != ncclSuccess) {
        pthread_mutex_unlock(&fake_lock);
        return result;
    }
    s = fake_split_join(comm, color, key, comm->group->size, NULL, 0);
    result = fake_split_run(comm, s, color, &child_config, newcomm, "ncclCommSplit");
    pthread_mutex_unlock(&fake_lock);
    return result;
}

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
static int fake_int_order(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* NCCL_SHRINK_ABORT: the parent's running kernels quit first (its flag raised until its work
   has drained, then lowered), as NCCL does before it shrinks. With fake_lock held. */
static void fake_shrink_abort(ncclComm_t comm)
{
    comm->shared->abort = 1;
    fake_wake_all();
    (void)fake_block_host(fake_drained, comm, comm->rank, "ncclCommShrink (NCCL_SHRINK_ABORT)");
    comm->shared->abort = 0;
}

/* As NCCL 2.27: a split of the ranks not in the list (color 0, key their rank: the order
   kept), collective over them only; the caller may not be in the list; NCCL sorts the list in
   place. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    ncclConfig_t child_config;
    ncclResult_t result = ncclSuccess;
    fake_split *s;
    int i;
    if (!comm || !newcomm || !excludeRanksList || excludeRanksCount <= 0 ||
        excludeRanksCount >= comm->group->size ||
        (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT))
        return ncclInvalidArgument;
    qsort(excludeRanksList, (size_t)excludeRanksCount, sizeof(int), fake_int_order);
    for (i = 0; i < excludeRanksCount; i++)
        if (excludeRanksList[i] < 0 || excludeRanksList[i] >= comm->group->size ||
            excludeRanksList[i] == comm->rank ||
            (i > 0 && excludeRanksList[i] == excludeRanksList[i - 1]))
            return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    if (!fake_comm_ready(comm, "ncclCommShrink")) {
        pthread_mutex_unlock(&fake_lock);
        return ncclInvalidArgument;
    }
    *newcomm = NULL;
    if (config) result = fake_config_resolve(config, &child_config);
    else child_config = comm->config;
    if (result == ncclSuccess) {
        if (shrinkFlags == NCCL_SHRINK_ABORT) fake_shrink_abort(comm);
        s = fake_split_join(comm, 0, comm->rank, comm->group->size - excludeRanksCount,
                            excludeRanksList, excludeRanksCount);
        result = fake_split_run(comm, s, 0, &child_config, newcomm, "ncclCommShrink");
    }
    pthread_mutex_unlock(&fake_lock);
    return result;
}
#endif
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t result = ncclSuccess;
    if (!comm) return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    if (!fake_comm_ready(comm, "ncclCommFinalize") || comm->finalized) {
        pthread_mutex_unlock(&fake_lock);
        return ncclInvalidArgument;
    }
    comm->finalized = 1;
    if (!comm->config.blocking) {
        fake_job *job = (fake_job *)calloc(1, sizeof *job);
        job->kind = FAKE_JOB_FINALIZE, job->comm = comm;
        result = fake_job_start(job);
    } else if (fake_block_host(fake_drained, comm, comm->rank,
                               "ncclCommFinalize (its queued work is not done)") <= 0)
        result = ncclSystemError;
    pthread_mutex_unlock(&fake_lock);
    return result;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    int r;
    if (!comm) return ncclSuccess;
    pthread_mutex_lock(&fake_lock);
    if (!fake_comm_ready(comm, "ncclCommDestroy")) {
        pthread_mutex_unlock(&fake_lock);
        return ncclInvalidArgument;
    }
    r = fake_block_host(fake_drained, comm, comm->rank,
                        "ncclCommDestroy (its queued work is not done)");
    comm->dead = 1;
    pthread_mutex_unlock(&fake_lock);
    return r > 0 ? ncclSuccess : ncclSystemError;
}
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    pthread_mutex_lock(&fake_lock);
    if (!fake_comm_alive(comm, "ncclCommAbort")) {
        pthread_mutex_unlock(&fake_lock);
        return ncclInvalidArgument;
    }
    fake_raise_abort(comm);
    if (fake_group_depth > 0 && NCCL_VERSION_CODE >= FAKE_GROUPED_ABORT_VERSION) {
        fake_abort_node *node = (fake_abort_node *)malloc(sizeof *node);
        node->comm = comm, node->next = fake_group_aborts;
        fake_group_aborts = node;
    } else
        fake_reclaim(comm);
    pthread_mutex_unlock(&fake_lock);
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    int alive;
    if (!comm || !async) return ncclInvalidArgument;
    pthread_mutex_lock(&fake_lock);
    alive = fake_comm_alive(comm, "ncclCommGetAsyncError");
    *async = comm->injected != ncclSuccess ? comm->injected : comm->state;
    pthread_mutex_unlock(&fake_lock);
    return alive ? ncclSuccess : ncclInvalidArgument;
}

/* Communicators made the way programs make them, on the devices of fake_devices_create. */
static unsigned long fake_ids_issued;

static int fake_group_complete(const void *arg)
{
    const fake_group *g = (const fake_group *)arg;
    int r;
    for (r = 0; r < g->size; r++)
        if (!g->members[r]) return 0;
    return 1;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&fake_lock);
    snprintf(id->internal, sizeof id->internal, "fake-nccl %lu", ++fake_ids_issued);
    pthread_mutex_unlock(&fake_lock);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    fake_device *d = fake_current_device("ncclCommInitRankConfig");
    unsigned long serial = 0;
    ncclConfig_t resolved;
    fake_group *g;
    if (!comm || !d) return ncclInvalidArgument;
    *comm = NULL;
    if (sscanf(id.internal, "fake-nccl %lu", &serial) != 1 || nranks < 1 || rank < 0 ||
        rank >= nranks || fake_config_resolve(config, &resolved) != ncclSuccess) {
        fake_violation(FAKE_PROTOCOL, "ncclCommInitRankConfig: rank %d of %d, id \"%.32s\"",
                       rank, nranks, id.internal);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&fake_lock);
    for (g = fake_groups; g && g->init_id != serial; g = g->next_of_job) {
    }
    if (!g) {
        g = fake_group_new(nranks);
        g->init_id = serial;
    }
    if (g->size != nranks || g->members[rank]) {
        pthread_mutex_unlock(&fake_lock);
        fake_violation(FAKE_PROTOCOL, "ncclCommInitRankConfig: rank %d of %d joins a job of %d "
                       "that has it already or differs in size", rank, nranks, g->size);
        return ncclInvalidArgument;
    }
    *comm = fake_comm_made(fake_comm_new(g, rank, d, &resolved, NULL));
    d->comms_made++;
    /* as NCCL, until every rank has joined (non-blocking ones too: their call then returns
       ncclSuccess, which NCCL allows) */
    if (fake_block_host(fake_group_complete, g, rank, "ncclCommInitRankConfig") <= 0) {
        pthread_mutex_unlock(&fake_lock);
        return ncclSystemError;
    }
    pthread_mutex_unlock(&fake_lock);
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    ncclConfig_t resolved;
    fake_group *g;
    int r;
    if (!comms || ndev < 1 || ndev > fake_device_count) return ncclInvalidArgument;
    for (r = 0; r < ndev; r++)
        if (devlist && (devlist[r] < 0 || devlist[r] >= fake_device_count))
            return ncclInvalidArgument;
    (void)fake_config_resolve(NULL, &resolved);
    pthread_mutex_lock(&fake_lock);
    g = fake_group_new(ndev);
    for (r = 0; r < ndev; r++)
        comms[r] = fake_comm_new(g, r, &fake_devices[devlist ? devlist[r] : r], &resolved, NULL);
    pthread_mutex_unlock(&fake_lock);
    return ncclSuccess;
}

/* ----------------------------------------------------------------------- test interface */

/* The calling thread is rank `rank` of the job: its CUDA calls use that rank's device. */
static void fake_bind_rank(int rank) { fake_thread_device = &fake_devices[rank]; }

/* A job's devices, one per rank (threads started); its communicators come from
   ncclCommInitRankConfig / ncclCommInitAll, or from fake_job_create. */
/* Forgets the violations recorded so far (a test that provoked one on purpose). */
static void fake_violations_clear(void)
{
    memset(fake_violation_counts, 0, sizeof fake_violation_counts);
    fake_violation_text[0] = '\0';
}

static void fake_devices_create(int ranks)
{
    int r;
    fake_violations_clear();
    fake_stopping = 0;
    fake_devices = (fake_device *)calloc((size_t)ranks, sizeof(fake_device));
    fake_device_count = ranks;
    for (r = 0; r < ranks; r++) {
        fake_devices[r].rank = r;
        pthread_cond_init(&fake_devices[r].wake, NULL);
        fake_start_thread(&fake_devices[r].thread, fake_device_main, &fake_devices[r], 0);
    }
}

/* A job of `ranks` ranks: their devices and one pool communicator per rank (comms[r]) with
   config (NULL: NCCL's defaults), before the rank threads start. */
static void fake_job_create(int ranks, const ncclConfig_t *config, ncclComm_t *comms)
{
    ncclConfig_t resolved;
    fake_group *g;
    int r;
    fake_devices_create(ranks);
    if (fake_config_resolve(config, &resolved) != ncclSuccess) {
        fprintf(stderr, "fake_job_create: invalid config\n");
        exit(1);
    }
    g = fake_group_new(ranks);
    for (r = 0; r < ranks; r++) comms[r] = fake_comm_new(g, r, &fake_devices[r], &resolved, NULL);
}

/* Messages sent and never received, in every communicator of the job. */
static long fake_undelivered(void)
{
    long n = 0;
    fake_group *g;
    int i;
    pthread_mutex_lock(&fake_lock);
    for (g = fake_groups; g; g = g->next_of_job)
        for (i = 0; i < g->size; i++) {
            const fake_channel *c;
            const fake_message *m;
            for (c = g->channels[i]; c; c = c->next)
                for (m = c->head; m; m = m->next) n++;
        }
    pthread_mutex_unlock(&fake_lock);
    return n;
}

/* Violations of every kind so far, and the first one's text. */
static int fake_violations(const char **text)
{
    *text = fake_violation_text;
    return fake_violation_total();
}
static int fake_violation_count(fake_violation_kind kind) { return fake_violation_counts[kind]; }

/* Of rank's device: the communicators its rank made (splits, shrinks, ncclCommInitRankConfig;
   the job's own pools are not counted), and those of them alive now (neither destroyed nor
   aborted). */
static void fake_comm_tally(int rank, long *made, long *alive)
{
    const struct fake_comm *c;
    pthread_mutex_lock(&fake_lock);
    *made = fake_devices[rank].comms_made, *alive = 0;
    for (c = fake_comms; c; c = c->next_of_job)
        if (c->made && c->device == &fake_devices[rank] && !c->dead) (*alive)++;
    pthread_mutex_unlock(&fake_lock);
}

/* Host waits and stuck sends past ms count as hangs (FAKE_DEFAULT_HANG_MS until changed). */
static void fake_set_hang_bound(double ms) { fake_hang_ms = ms; }

/* From now on ncclCommGetAsyncError(comm) answers error and comm's kernels stall. */
static void fake_inject_async_error(ncclComm_t comm, ncclResult_t error)
{
    pthread_mutex_lock(&fake_lock);
    comm->injected = error;
    fake_wake_all();
    pthread_mutex_unlock(&fake_lock);
}

/* The config comm resolved (what a split inherited, or NCCL's defaults). */
static ncclConfig_t fake_comm_config(ncclComm_t comm)
{
    ncclConfig_t c;
    pthread_mutex_lock(&fake_lock);
    c = comm->config;
    pthread_mutex_unlock(&fake_lock);
    return c;
}

/* The peers comm's rank has sent to so far and how many sends each (at most cap of them, the
   number of all returned): what a test compares before and after a phase. */
static int fake_send_counts(ncclComm_t comm, int *peers, unsigned long *sends, int cap)
{
    const fake_channel *c;
    int n = 0;
    pthread_mutex_lock(&fake_lock);
    for (c = comm->group->channels[comm->rank]; c; c = c->next) {
        if (c->sends == 0) continue;
        if (n < cap) peers[n] = c->to, sends[n] = c->sends;
        n++;
    }
    pthread_mutex_unlock(&fake_lock);
    return n;
}

/* Whether comm's abort flag is up (its kernels quit). */
static int fake_abort_raised(ncclComm_t comm)
{
    int raised;
    pthread_mutex_lock(&fake_lock);
    raised = comm->shared->abort;
    pthread_mutex_unlock(&fake_lock);
    return raised;
}

/* Bytes of point-to-point payload comm's sends and receives have moved so far. */
static void fake_traffic(ncclComm_t comm, unsigned long long *sent, unsigned long long *received)
{
    pthread_mutex_lock(&fake_lock);
    *sent = comm->sent_bytes, *received = comm->received_bytes;
    pthread_mutex_unlock(&fake_lock);
}

static void fake_free_group(fake_group *g)
{
    int i;
    for (i = 0; i < g->size; i++)
        while (g->channels[i]) {
            fake_channel *c = g->channels[i];
            g->channels[i] = c->next;
            while (c->head) {
                fake_message *m = c->head;
                c->head = m->next;
                free(m);
            }
            free(c);
        }
    while (g->collectives) {
        fake_collective *c = g->collectives;
        g->collectives = c->next;
        for (i = 0; i < g->size; i++) free(c->data[i]);
        free(c->data), free(c);
    }
    while (g->splits) {
        fake_split *s = g->splits;
        g->splits = s->next;
        free(s->color), free(s->key), free(s->joined), free(s->child), free(s);
    }
    free(g->members), free(g->channels), free(g->ring_ready), free(g);
}

static void fake_free_device(fake_device *d)
{
    while (d->streams) {
        cudaStream_t s = d->streams;
        d->streams = s->next_of_device;
        while (s->head) {
            fake_op *op = s->head;
            s->head = op->next;
            fake_op_free(op);
        }
        free(s);
    }
    while (d->blocks) {
        fake_block *b = d->blocks;
        d->blocks = b->next;
        free(b->base), free(b);
    }
    pthread_cond_destroy(&d->wake);
}

/* After the rank threads: ends the background jobs still waiting (each a violation), stops the
   devices and frees everything of the job. */
static void fake_job_destroy(void)
{
    int r;
    pthread_mutex_lock(&fake_lock);
    fake_stopping = 1;
    while (fake_live_jobs > 0) {
        pthread_cond_broadcast(&fake_control);
        fake_wait_ms(&fake_control, FAKE_WAIT_SLICE_MS);
    }
    for (r = 0; r < fake_device_count; r++) fake_devices[r].shutdown = 1;
    fake_wake_all();
    pthread_mutex_unlock(&fake_lock);
    for (r = 0; r < fake_device_count; r++) pthread_join(fake_devices[r].thread, NULL);
    for (r = 0; r < fake_device_count; r++) fake_free_device(&fake_devices[r]);
    free(fake_devices);
    fake_devices = NULL, fake_device_count = 0;
    while (fake_groups) {
        fake_group *g = fake_groups;
        fake_groups = g->next_of_job;
        fake_free_group(g);
    }
    while (fake_comms) {
        ncclComm_t c = fake_comms;
        fake_comms = c->next_of_job;
        free(c);
    }
    while (fake_shareds) {
        fake_shared *s = fake_shareds;
        fake_shareds = s->next_of_job;
        free(s);
    }
    while (fake_dead_events) {
        cudaEvent_t e = fake_dead_events;
        fake_dead_events = e->next_dead;
        free(e);
    }
}

/* Fault injection (DCP_NCCL_FAULT_HOOK): the n-th hooked call of this thread (1-based) fails
   without running; 0: none. Inside a group it fails as a real NCCL call does there: the group
   is poisoned (NCCL's ncclGroupError) and its ncclGroupEnd launches nothing and returns the
   error. A failed ncclGroupEnd did not run: its group stays open for the caller to close. */
static __thread long fake_fault_at, fake_fault_calls;
static __thread const char *fake_stall_call;
static __thread double fake_stall_ms;
static void fake_fault_arm(long n) { fake_fault_at = n, fake_fault_calls = 0; }
static long fake_fault_count(void) { return fake_fault_calls; }
/* A rank that stays alive but is absent: its next hooked call whose text starts with `call`
   runs ms late (once). */
static void fake_fault_stall(const char *call, double ms)
{
    fake_stall_call = call, fake_stall_ms = ms;
}
static int fake_fault_hook(const char *call)
{
    if (fake_stall_call && strncmp(call, fake_stall_call, strlen(fake_stall_call)) == 0) {
        fake_stall_call = NULL;
        fake_sleep_ms(fake_stall_ms);
    }
    if (++fake_fault_calls != fake_fault_at) return 0;
    if (fake_group_depth > 0) fake_group_failed = 1;
    return 1;
}

#ifdef FAKE_NCCL_CUDA_RUNTIME
/* Programs whose ranks make their own communicators (ncclCommInitRankConfig) run as threads:
   fake_run_ranks creates the job's devices, runs rank_main(rank, ranks, user) on a thread per
   rank bound to its device, and destroys the job. It returns the number of ranks whose
   rank_main returned nonzero, plus one when the transport recorded a violation (printed). */
typedef int (*fake_rank_main)(int rank, int ranks, void *user);
typedef struct fake_rank_start {
    pthread_t thread;
    int rank, ranks, status;
    fake_rank_main main_fn;
    void *user;
} fake_rank_start;

static void *fake_rank_thread(void *arg)
{
    fake_rank_start *start = (fake_rank_start *)arg;
    fake_bind_rank(start->rank);
    start->status = start->main_fn(start->rank, start->ranks, start->user);
    return NULL;
}

static int fake_run_ranks(int ranks, fake_rank_main main_fn, void *user)
{
    fake_rank_start *starts = (fake_rank_start *)calloc((size_t)ranks, sizeof *starts);
    const char *text = "";
    int r, failed = 0;
    fake_devices_create(ranks);
    for (r = 0; r < ranks; r++) {
        starts[r].rank = r, starts[r].ranks = ranks, starts[r].main_fn = main_fn;
        starts[r].user = user;
        if (pthread_create(&starts[r].thread, NULL, fake_rank_thread, &starts[r]) != 0) {
            fprintf(stderr, "fake_run_ranks: cannot start rank thread %d\n", r);
            exit(1);
        }
    }
    for (r = 0; r < ranks; r++) {
        pthread_join(starts[r].thread, NULL);
        failed += starts[r].status != 0;
    }
    if (fake_violations(&text)) {
        fprintf(stderr, "host transport: %d violations, the first: %s\n", fake_violations(&text),
                text);
        failed++;
    }
    fake_job_destroy();
    free(starts);
    return failed;
}
#endif
