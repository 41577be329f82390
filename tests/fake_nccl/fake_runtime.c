/* The host transport behind tests/fake_nccl/nccl.h and cuda_runtime.h (see those headers):
   simulated ranks are threads; a stream is a queue of operations that runs when its owner
   polls it; NCCL traffic goes through mailboxes shared by the communicators of a job, under
   one mutex. Test-only global state: fake_job_create / fake_job_destroy bracket a job, and
   protocol violations (a receive whose size differs from its send, a group left open, a
   message nobody received) are counted for the test to assert on. Included by the test file
   (one translation unit), after _POSIX_C_SOURCE is defined. */
#include "nccl.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Longest a fake call itself blocks (a split waiting for its peers, a synchronize). */
#define FAKE_DEADLINE_MS 30000.0
/* Polls a non-blocking communicator answers ncclInProgress before it settles. */
#define FAKE_NONBLOCKING_POLLS 2
/* Pause of a query that finds its stream not ready: the "device" is busy, the host sleeps. */
#define FAKE_NOT_READY_PAUSE_NS 20000L
/* Bytes cudaMalloc fills new memory with: every float reads as NaN until written. */
#define FAKE_POISON 0xFF

typedef enum {
    FAKE_OP_NOP,
    FAKE_OP_COPY,
    FAKE_OP_SET,
    FAKE_OP_HOST,
    FAKE_OP_RECORD,
    FAKE_OP_WAIT,
    FAKE_OP_SEND,
    FAKE_OP_RECV,
    FAKE_OP_ALLREDUCE,
    FAKE_OP_BROADCAST
} fake_op_kind;

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
    ncclComm_t comm;
    int peer;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t reduction;
    int root;
    unsigned long sequence;
    int deposited;
} fake_op;

struct fake_stream {
    fake_op *head, *tail;
    cudaError_t error;
    int busy;
    struct fake_stream *next_of_thread;
};

struct fake_event {
    cudaStream_t stream;
    unsigned long recorded, completed;
};

typedef struct fake_message {
    struct fake_message *next;
    size_t bytes;
    unsigned char data[1];
} fake_message;

typedef struct fake_collective {
    struct fake_collective *next;
    unsigned long sequence;
    fake_op_kind kind;
    size_t bytes;
    int root;
    int deposited, consumed;
    unsigned char **data; /* [size] */
} fake_collective;

struct fake_group;
typedef struct fake_split {
    struct fake_split *next;
    unsigned long sequence;
    int deposited, consumed;
    int *color, *key;
    struct fake_group **child; /* [size], by color */
} fake_split;

typedef struct fake_group {
    struct fake_group *next_of_job;
    int size;
    fake_message **mailbox_head, **mailbox_tail; /* [from * size + to] */
    fake_collective *collectives;
    fake_split *splits;
} fake_group;

struct fake_comm {
    fake_group *group;
    int rank;
    int blocking;
    int pending_polls;
    ncclResult_t async_error;
    unsigned long collectives, splits;
    unsigned long long sent_bytes, received_bytes; /* point-to-point payload that ran */
};

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_changed = PTHREAD_COND_INITIALIZER;
static fake_group *fake_groups;
static int fake_violation_count;
static char fake_violation_text[512];

static __thread struct fake_stream *fake_thread_streams;
static __thread int fake_group_depth;
static __thread ncclComm_t fake_group_comm;
static __thread int fake_group_ops;
static __thread long fake_fault_at, fake_fault_calls;

static double fake_now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec * 1e3 + (double)now.tv_nsec * 1e-6;
}

static void fake_violation(const char *what)
{
    pthread_mutex_lock(&fake_lock);
    if (fake_violation_count++ == 0) snprintf(fake_violation_text, sizeof fake_violation_text, "%s", what);
    pthread_mutex_unlock(&fake_lock);
}

/* ----------------------------------------------------------------------- test interface */

/* The n-th hooked call of this thread (1-based) fails; 0: none. */
static void fake_fault_arm(long n) { fake_fault_at = n, fake_fault_calls = 0; }
static long fake_fault_count(void) { return fake_fault_calls; }
static int fake_fault_hook(const char *call)
{
    if (++fake_fault_calls != fake_fault_at) return 0;
    /* NCCL closes the group even when ncclGroupEnd fails: so does the injected failure */
    if (strncmp(call, "ncclGroupEnd", 12) == 0 && fake_group_depth > 0) fake_group_depth--;
    return 1;
}

static fake_group *fake_group_new(int size)
{
    fake_group *g = (fake_group *)calloc(1, sizeof *g);
    g->size = size;
    g->mailbox_head = (fake_message **)calloc((size_t)size * (size_t)size, sizeof(fake_message *));
    g->mailbox_tail = (fake_message **)calloc((size_t)size * (size_t)size, sizeof(fake_message *));
    g->next_of_job = fake_groups; /* under fake_lock, or before the rank threads start */
    fake_groups = g;
    return g;
}

static ncclComm_t fake_comm_new(fake_group *group, int rank, int blocking)
{
    ncclComm_t c = (ncclComm_t)calloc(1, sizeof *c);
    c->group = group, c->rank = rank, c->blocking = blocking;
    return c;
}

/* A job of `ranks` ranks: one pool communicator per rank (comms[r]), before the threads. */
static void fake_job_create(int ranks, int blocking, ncclComm_t *comms)
{
    fake_group *g;
    int r;
    fake_violation_count = 0;
    fake_violation_text[0] = '\0';
    g = fake_group_new(ranks);
    for (r = 0; r < ranks; r++) comms[r] = fake_comm_new(g, r, blocking);
}

/* Messages sent and never received, in every communicator of the job. */
static long fake_undelivered(void)
{
    long n = 0;
    fake_group *g;
    int i;
    for (g = fake_groups; g; g = g->next_of_job)
        for (i = 0; i < g->size * g->size; i++) {
            fake_message *m;
            for (m = g->mailbox_head[i]; m; m = m->next) n++;
        }
    return n;
}

static int fake_violations(const char **text)
{
    *text = fake_violation_text;
    return fake_violation_count;
}

/* After the threads: frees every group of the job (communicators are each rank's). */
static void fake_job_destroy(void)
{
    while (fake_groups) {
        fake_group *g = fake_groups;
        int i;
        fake_groups = g->next_of_job;
        for (i = 0; i < g->size * g->size; i++)
            while (g->mailbox_head[i]) {
                fake_message *m = g->mailbox_head[i];
                g->mailbox_head[i] = m->next;
                free(m);
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
            free(s->color), free(s->key), free(s->child), free(s);
        }
        free(g->mailbox_head), free(g->mailbox_tail), free(g);
    }
}

/* Bytes of point-to-point payload comm's sends and receives have moved so far (the bytes on
   the wire of a simulated rank); only the owning rank's thread changes them. */
static void fake_traffic(ncclComm_t comm, unsigned long long *sent, unsigned long long *received)
{
    *sent = comm->sent_bytes, *received = comm->received_bytes;
}

/* Kernel stand-ins: fn(arg) runs when the stream reaches it; arg is freed after. */
static cudaError_t fake_enqueue_host(cudaStream_t stream, int (*fn)(void *), void *arg);

/* -------------------------------------------------------------------------------- streams */

static cudaError_t fake_push(cudaStream_t stream, fake_op *op)
{
    if (!stream) {
        free(op);
        return cudaErrorInvalidValue; /* the layer never uses the legacy stream */
    }
    op->next = NULL;
    if (stream->tail) stream->tail->next = op;
    else stream->head = op;
    stream->tail = op;
    return cudaSuccess;
}

static fake_op *fake_op_new(fake_op_kind kind)
{
    fake_op *op = (fake_op *)calloc(1, sizeof *op);
    op->kind = kind;
    return op;
}

static int fake_progress(cudaStream_t stream);

static size_t fake_type_size(ncclDataType_t type)
{
    switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32: return 4;
    case ncclInt64:
    case ncclUint64: return 8;
    }
    return 0;
}

static void fake_reduce(fake_collective *c, int size, ncclDataType_t type, ncclRedOp_t op,
                        size_t count, unsigned char *out)
{
    size_t i;
    int r;
    for (i = 0; i < count; i++) {
        if (type == ncclUint64 || type == ncclInt64) {
            uint64_t acc;
            memcpy(&acc, c->data[0] + 8 * i, 8);
            for (r = 1; r < size; r++) {
                uint64_t x;
                memcpy(&x, c->data[r] + 8 * i, 8);
                if (op == ncclSum) acc += x;
                else if (type == ncclUint64 ? (op == ncclMax ? x > acc : x < acc)
                                            : (op == ncclMax ? (int64_t)x > (int64_t)acc
                                                             : (int64_t)x < (int64_t)acc))
                    acc = x;
            }
            memcpy(out + 8 * i, &acc, 8);
        } else if (type == ncclInt32 || type == ncclUint32) {
            int32_t acc;
            memcpy(&acc, c->data[0] + 4 * i, 4);
            for (r = 1; r < size; r++) {
                int32_t x;
                memcpy(&x, c->data[r] + 4 * i, 4);
                if (op == ncclSum) acc += x;
                else if (op == ncclMax ? x > acc : x < acc) acc = x;
            }
            memcpy(out + 4 * i, &acc, 4);
        } else {
            unsigned char acc = c->data[0][i];
            for (r = 1; r < size; r++) {
                unsigned char x = c->data[r][i];
                if (op == ncclSum) acc = (unsigned char)(acc + x);
                else if (op == ncclMax ? x > acc : x < acc) acc = x;
            }
            out[i] = acc;
        }
    }
}

/* A collective op: deposit this rank's input once, finish when every rank has. */
static int fake_run_collective(fake_op *op)
{
    fake_group *g = op->comm->group;
    fake_collective *c, **link;
    const size_t bytes = op->count * fake_type_size(op->type);
    int done = 0;
    pthread_mutex_lock(&fake_lock);
    for (c = g->collectives; c && c->sequence != op->sequence; c = c->next) {
    }
    if (!c) {
        c = (fake_collective *)calloc(1, sizeof *c);
        c->sequence = op->sequence, c->kind = op->kind, c->bytes = bytes, c->root = op->root;
        c->data = (unsigned char **)calloc((size_t)g->size, sizeof(unsigned char *));
        c->next = g->collectives;
        g->collectives = c;
    }
    if (!op->deposited) {
        if (c->kind != op->kind || c->bytes != bytes || c->root != op->root) {
            pthread_mutex_unlock(&fake_lock);
            fake_violation("collectives of one sequence number differ in kind, size or root");
            pthread_mutex_lock(&fake_lock);
        }
        c->data[op->comm->rank] = (unsigned char *)malloc(bytes ? bytes : 1);
        if (bytes) memcpy(c->data[op->comm->rank], op->source, bytes);
        c->deposited++;
        op->deposited = 1;
    }
    if (c->deposited == g->size) {
        if (op->kind == FAKE_OP_BROADCAST) {
            if (bytes) memcpy(op->destination, c->data[c->root], bytes);
        } else
            fake_reduce(c, g->size, op->type, op->reduction, op->count,
                        (unsigned char *)op->destination);
        done = 1;
        if (++c->consumed == g->size) {
            int r;
            for (link = &g->collectives; *link != c; link = &(*link)->next) {
            }
            *link = c->next;
            for (r = 0; r < g->size; r++) free(c->data[r]);
            free(c->data), free(c);
        }
    }
    pthread_mutex_unlock(&fake_lock);
    return done;
}

/* 1: the op finished; 0: not yet (a receive without its send, an unmet event, a collective
   some rank has not joined). */
static int fake_run(cudaStream_t stream, fake_op *op)
{
    switch (op->kind) {
    case FAKE_OP_NOP: return 1;
    case FAKE_OP_COPY: memmove(op->destination, op->source, op->bytes); return 1;
    case FAKE_OP_SET: memset(op->destination, op->value, op->bytes); return 1;
    case FAKE_OP_HOST:
        if (op->fn(op->arg) != 0) {
            stream->error = cudaErrorLaunchFailure;
            fake_violation("a kernel stand-in failed");
        }
        return 1;
    case FAKE_OP_RECORD: op->event->completed = op->target; return 1;
    case FAKE_OP_WAIT:
        if (op->event->completed >= op->target) return 1;
        if (op->event->stream && op->event->stream != stream) fake_progress(op->event->stream);
        return op->event->completed >= op->target;
    case FAKE_OP_SEND: {
        fake_group *g = op->comm->group;
        fake_message *m = (fake_message *)malloc(sizeof *m + op->bytes);
        const int box = op->comm->rank * g->size + op->peer;
        m->next = NULL, m->bytes = op->bytes;
        memcpy(m->data, op->source, op->bytes);
        op->comm->sent_bytes += op->bytes;
        pthread_mutex_lock(&fake_lock);
        if (g->mailbox_tail[box]) g->mailbox_tail[box]->next = m;
        else g->mailbox_head[box] = m;
        g->mailbox_tail[box] = m;
        pthread_mutex_unlock(&fake_lock);
        return 1;
    }
    case FAKE_OP_RECV: {
        fake_group *g = op->comm->group;
        const int box = op->peer * g->size + op->comm->rank;
        fake_message *m;
        int mismatch = 0;
        pthread_mutex_lock(&fake_lock);
        m = g->mailbox_head[box];
        if (m) {
            g->mailbox_head[box] = m->next;
            if (!m->next) g->mailbox_tail[box] = NULL;
        }
        pthread_mutex_unlock(&fake_lock);
        if (!m) return 0;
        mismatch = m->bytes != op->bytes;
        op->comm->received_bytes += m->bytes;
        memcpy(op->destination, m->data, m->bytes < op->bytes ? m->bytes : op->bytes);
        free(m);
        if (mismatch) fake_violation("a receive's byte count differs from its send's");
        return 1;
    }
    case FAKE_OP_ALLREDUCE:
    case FAKE_OP_BROADCAST: return fake_run_collective(op);
    }
    return 1;
}

/* Runs the stream's ops in order while they can finish; 1 when it is empty. */
static int fake_progress(cudaStream_t stream)
{
    if (stream->busy) return stream->head == NULL;
    stream->busy = 1;
    while (stream->head) {
        fake_op *op = stream->head;
        if (!fake_run(stream, op)) break;
        stream->head = op->next;
        if (!stream->head) stream->tail = NULL;
        free(op->arg);
        free(op);
    }
    stream->busy = 0;
    return stream->head == NULL;
}

/* An aborted communicator's work ends: its ops on this thread's streams become no-ops. */
static void fake_drop_ops(ncclComm_t comm)
{
    struct fake_stream *s;
    for (s = fake_thread_streams; s; s = s->next_of_thread) {
        fake_op *op;
        for (op = s->head; op; op = op->next)
            if (op->comm == comm) op->kind = FAKE_OP_NOP, op->comm = NULL;
    }
}

static int fake_has_ops(ncclComm_t comm)
{
    struct fake_stream *s;
    for (s = fake_thread_streams; s; s = s->next_of_thread) {
        fake_op *op;
        for (op = s->head; op; op = op->next)
            if (op->comm == comm) return 1;
    }
    return 0;
}

static cudaError_t fake_enqueue_host(cudaStream_t stream, int (*fn)(void *), void *arg)
{
    fake_op *op = fake_op_new(FAKE_OP_HOST);
    op->fn = fn, op->arg = arg;
    return fake_push(stream, op);
}

/* ------------------------------------------------------------------------- CUDA runtime */

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
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority)
{
    (void)flags, (void)priority;
    *stream = (cudaStream_t)calloc(1, sizeof **stream);
    (*stream)->next_of_thread = fake_thread_streams;
    fake_thread_streams = *stream;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    return cudaStreamCreateWithPriority(stream, flags, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    struct fake_stream **link;
    if (!stream) return cudaErrorInvalidValue;
    if (stream->head) fake_violation("a stream destroyed with work pending");
    for (link = &fake_thread_streams; *link && *link != stream; link = &(*link)->next_of_thread) {
    }
    if (*link) *link = stream->next_of_thread;
    while (stream->head) {
        fake_op *op = stream->head;
        stream->head = op->next;
        free(op->arg), free(op);
    }
    free(stream);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    if (!stream) return cudaErrorInvalidValue;
    if (fake_progress(stream)) return stream->error;
    if (stream->error) return stream->error;
    {
        struct timespec pause = {0, FAKE_NOT_READY_PAUSE_NS};
        nanosleep(&pause, NULL);
    }
    return cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    const double start = fake_now_ms();
    cudaError_t e;
    while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady)
        if (fake_now_ms() - start > FAKE_DEADLINE_MS) {
            fake_violation("cudaStreamSynchronize would block forever");
            return cudaErrorUnknown;
        }
    return e;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    fake_op *op;
    (void)flags;
    if (!event) return cudaErrorInvalidValue;
    op = fake_op_new(FAKE_OP_WAIT);
    op->event = event, op->target = event->recorded;
    return fake_push(stream, op);
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    *event = (cudaEvent_t)calloc(1, sizeof **event);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    fake_op *op;
    if (!event || !stream) return cudaErrorInvalidValue;
    op = fake_op_new(FAKE_OP_RECORD);
    event->stream = stream;
    op->event = event, op->target = ++event->recorded;
    return fake_push(stream, op);
}
cudaError_t cudaMalloc(void **pointer, size_t bytes)
{
    *pointer = malloc(bytes ? bytes : 1);
    if (!*pointer) return cudaErrorMemoryAllocation;
    memset(*pointer, FAKE_POISON, bytes);
    return cudaSuccess;
}
cudaError_t cudaFree(void *pointer)
{
    free(pointer);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *destination, const void *source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream)
{
    fake_op *op = fake_op_new(FAKE_OP_COPY);
    (void)kind;
    op->destination = destination, op->source = source, op->bytes = bytes;
    return fake_push(stream, op);
}
cudaError_t cudaMemsetAsync(void *destination, int value, size_t bytes, cudaStream_t stream)
{
    fake_op *op = fake_op_new(FAKE_OP_SET);
    op->destination = destination, op->value = value, op->bytes = bytes;
    return fake_push(stream, op);
}

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
ncclResult_t ncclCommCount(ncclComm_t comm, int *count)
{
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->group->size;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank)
{
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

/* A non-blocking communicator answers ncclInProgress and settles after a few polls. */
static ncclResult_t fake_started(ncclComm_t comm)
{
    if (comm->blocking) return ncclSuccess;
    comm->pending_polls = FAKE_NONBLOCKING_POLLS;
    return ncclInProgress;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *child,
                           ncclConfig_t *config)
{
    fake_group *g;
    fake_split *s;
    const double start = fake_now_ms();
    int r, members = 0, index = 0;
    if (!comm || !child) return ncclInvalidArgument;
    g = comm->group;
    *child = NULL;
    pthread_mutex_lock(&fake_lock);
    for (s = g->splits; s && s->sequence != comm->splits; s = s->next) {
    }
    if (!s) {
        s = (fake_split *)calloc(1, sizeof *s);
        s->sequence = comm->splits;
        s->color = (int *)malloc((size_t)g->size * sizeof(int));
        s->key = (int *)malloc((size_t)g->size * sizeof(int));
        s->child = (fake_group **)calloc((size_t)g->size, sizeof(fake_group *));
        s->next = g->splits;
        g->splits = s;
    }
    comm->splits++;
    s->color[comm->rank] = color, s->key[comm->rank] = key;
    s->deposited++;
    pthread_cond_broadcast(&fake_changed);
    while (s->deposited < g->size) { /* a split is collective over the parent */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 10000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&fake_changed, &fake_lock, &until);
        if (fake_now_ms() - start > FAKE_DEADLINE_MS) {
            pthread_mutex_unlock(&fake_lock);
            return ncclSystemError; /* real NCCL would hang here */
        }
    }
    if (color >= 0) {
        for (r = 0; r < g->size; r++)
            if (s->color[r] == color) {
                members++;
                if (s->key[r] < key || (s->key[r] == key && r < comm->rank)) index++;
            }
        if (color >= g->size) color = g->size - 1; /* the fake's table index only */
        if (!s->child[color]) s->child[color] = fake_group_new(members);
        *child = fake_comm_new(s->child[color], index, config ? config->blocking : 1);
    }
    pthread_mutex_unlock(&fake_lock);
    if (*child) return fake_started(*child);
    return fake_started(comm);
}
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm) return ncclInvalidArgument;
    return fake_started(comm);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm) return ncclInvalidArgument;
    if (fake_has_ops(comm)) {
        fake_violation("a communicator destroyed with work pending on its streams");
        fake_drop_ops(comm);
    }
    free(comm);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm) return ncclSuccess;
    fake_drop_ops(comm);
    free(comm);
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async)
{
    if (!comm || !async) return ncclInvalidArgument;
    if (comm->pending_polls > 0) {
        comm->pending_polls--;
        *async = ncclInProgress;
        return ncclSuccess;
    }
    *async = comm->async_error;
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void)
{
    if (fake_group_depth++ == 0) fake_group_comm = NULL, fake_group_ops = 0;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void)
{
    if (fake_group_depth == 0) {
        fake_violation("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--fake_group_depth > 0 || !fake_group_comm || fake_group_ops == 0) return ncclSuccess;
    return fake_started(fake_group_comm);
}
static ncclResult_t fake_point_to_point(fake_op_kind kind, void *data, size_t count,
                                        ncclDataType_t type, int peer, ncclComm_t comm,
                                        cudaStream_t stream)
{
    fake_op *op;
    if (!comm || !stream || peer < 0 || peer >= comm->group->size || !fake_type_size(type))
        return ncclInvalidArgument;
    op = fake_op_new(kind);
    op->comm = comm, op->peer = peer, op->bytes = count * fake_type_size(type);
    op->source = data, op->destination = data;
    if (fake_group_depth > 0) fake_group_comm = comm, fake_group_ops++;
    return fake_push(stream, op) == cudaSuccess ? ncclSuccess : ncclInvalidArgument;
}
ncclResult_t ncclSend(const void *data, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return fake_point_to_point(FAKE_OP_SEND, (void *)(uintptr_t)data, count, type, peer, comm,
                               stream);
}
ncclResult_t ncclRecv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    return fake_point_to_point(FAKE_OP_RECV, data, count, type, peer, comm, stream);
}
static ncclResult_t fake_collective_op(fake_op_kind kind, const void *send, void *receive,
                                       size_t count, ncclDataType_t type, ncclRedOp_t reduction,
                                       int root, ncclComm_t comm, cudaStream_t stream)
{
    fake_op *op;
    if (!comm || !stream || !fake_type_size(type) || root < 0 || root >= comm->group->size)
        return ncclInvalidArgument;
    op = fake_op_new(kind);
    op->comm = comm, op->source = send, op->destination = receive, op->count = count;
    op->type = type, op->reduction = reduction, op->root = root;
    op->sequence = comm->collectives++;
    if (fake_push(stream, op) != cudaSuccess) return ncclInvalidArgument;
    return fake_started(comm);
}
ncclResult_t ncclAllReduce(const void *send, void *receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    return fake_collective_op(FAKE_OP_ALLREDUCE, send, receive, count, type, op, 0, comm, stream);
}
ncclResult_t ncclBroadcast(const void *send, void *receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    return fake_collective_op(FAKE_OP_BROADCAST, send, receive, count, type, ncclSum, root, comm,
                              stream);
}
