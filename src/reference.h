/* src/reference.h - the operation contracts every kernel and reference checks its arguments
   with, and the CPU references (absent with DCP_NO_REFERENCE): attention with LSE and ring
   steps, merging through LSE, RoPE and conv1d.
   Part of dcp.h: edit here, then run `make amalgamate` (tools/amalgamate.py writes dcp.h
   from src/dcp.h.in and these parts); make test fails while dcp.h is stale. */
//@@ declarations
/* ======================================================================= operation contracts
   The arguments every attention, RoPE and conv1d entry point takes, CPU reference or CUDA
   kernel alike, and the checks they all run first: element types, operation parameters with
   their defaults, the view of a ring step and the ring's step plan. Always compiled, so that
   dcp_cuda.cu and dcp_nccl.h build whatever switches a user sets. No allocation. */

/* Element type of a device tensor. */
typedef enum dcp_dtype {
    DCP_DTYPE_FLOAT32 = 0,
    DCP_DTYPE_BFLOAT16 = 1,
    DCP_DTYPE_FLOAT16 = 2
} dcp_dtype;

/* Bytes of one element of dtype (4 or 2); 0 for a value that is not a dcp_dtype. */
DCPDEF size_t dcp_dtype_size(dcp_dtype dtype);
/* Constant text for dtype ("float32", "bfloat16", "float16"; "unknown" for a value that is not
   a dcp_dtype): error messages of every unit and test labels use it. */
DCPDEF const char *dcp_dtype_name(dcp_dtype dtype);

/* Largest head_dim of attention: flash-attention's. It bounds the row of doubles each
   reference keeps on the stack. */
#define DCP_MAX_HEAD_DIM 256

/* Zero-initialise, set num_heads and head_dim. Q is [rows, num_heads, head_dim], K and V
   [rows, num_kv_heads, head_dim]; query head h reads kv head h / (num_heads / num_kv_heads). */
typedef struct dcp_attention_params {
    int32_t num_heads;    /* >= 1. Required. */
    int32_t num_kv_heads; /* divides num_heads (GQA); default num_heads */
    int32_t head_dim;     /* in [1, DCP_MAX_HEAD_DIM]. Required. */
    int32_t causal;       /* 0 or 1: a key is visible iff its position <= the query's */
    double softmax_scale; /* finite and > 0; default 1 / sqrt(head_dim) */
} dcp_attention_params;

/* The rows one step takes part with: queries from the q buffer of rank q_rank (its q_half of
   every sequence) against keys and values from the buffer of rank kv_rank (its kv_half).
   All zero: a rank's whole buffer against itself, which at cp 1 is plain varlen attention. */
typedef struct dcp_attention_view {
    int32_t q_rank;   /* rank in [0, cp) whose q buffer is read and whose out is written */
    dcp_half q_half;  /* its rows of every sequence the step computes */
    int32_t kv_rank;  /* rank in [0, cp) whose k and v buffers are read */
    dcp_half kv_half; /* its rows of every sequence that are keys */
} dcp_attention_view;

/* Checks params and fills their defaults (num_kv_heads, softmax_scale) into *resolved, as
   every attention entry point, CPU or CUDA, does first; view NULL means all zero, and
   dcp_attention_view_validate checks cp (any size in [1, DCP_MAX_RANKS]), its ranks against
   cp and its halves (which need cp > 1). No allocation. */
DCPDEF dcp_status dcp_attention_params_resolve(const dcp_attention_params *params,
                                               dcp_attention_params *resolved,
                                               dcp_error *error);
DCPDEF dcp_status dcp_attention_view_validate(const dcp_attention_view *view, int32_t cp,
                                              dcp_error *error);

/* The ring order of a group of cp ranks (any cp in [1, DCP_MAX_RANKS]): the even ranks of
   the group going up, then the odd ones coming down, 0, 2, 4, ..., 5, 3, 1, and back to 0.
   Each rank's neighbours in that order are ranks r +- 1 or r +- 2, so that, a group being
   consecutive ranks of the pool, every ring of every size and position sends to at most four
   peers of the pool: r - 2, r - 1, r + 1, r + 2 (a plain ring r + 1 would reach a different
   rank for every group size, up to the whole pool across sizes). The zigzag chunks stay by
   rank: rank r of the group holds chunks r and 2cp - 1 - r whatever its ring position.
   dcp_ring_order: the rank at ring position `position`; dcp_ring_position: the inverse. */
DCPDEF dcp_status dcp_ring_order(int32_t cp, int32_t position, int32_t *rank, dcp_error *error);
DCPDEF dcp_status dcp_ring_position(int32_t cp, int32_t rank, int32_t *position,
                                    dcp_error *error);

/* Step `step` of a ring of cp ranks (any cp in [1, DCP_MAX_RANKS]) on rank `rank`
   (docs/DESIGN.md section 5): the KV comes from the rank `step` places before it in the ring
   order (dcp_ring_order), so that every step passes KV between ring neighbours. Causal: step 0
   is the whole local Q against the local KV with the mask; a source below rank gives all
   local Q against its first half, a source above rank the local second-half Q against all
   its KV, both without a mask (every key precedes every query there). Non-causal: every step
   is all against all without a mask. */
typedef struct dcp_ring_step {
    dcp_attention_view view; /* q_rank = rank, kv_rank = the source */
    int32_t causal;          /* 1: the step needs the causal mask */
} dcp_ring_step;

DCPDEF dcp_status dcp_ring_step_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal,
                                     dcp_ring_step *plan, dcp_error *error);

#define DCP_DEFAULT_ROPE_THETA 10000.0

typedef enum dcp_rope_style {
    DCP_ROPE_ROTATE_HALF = 0, /* GPT-NeoX: dims i and i + rotary_dim / 2 form a pair */
    DCP_ROPE_INTERLEAVED = 1  /* GPT-J: dims 2i and 2i + 1 form a pair */
} dcp_rope_style;

/* Zero-initialise for the defaults; NULL options mean all defaults. Pair i turns by the angle
   position x inv_freq[i], computed in double, position the global one of the CP split. */
typedef struct dcp_rope_options {
    dcp_rope_style style;   /* default DCP_ROPE_ROTATE_HALF */
    int32_t rotary_dim;     /* even, <= head_dim; dims past it are copied; default head_dim */
    double theta_base;      /* > 0; inv_freq[i] = theta_base^(-2i / rotary_dim); default
                               DCP_DEFAULT_ROPE_THETA; unused with a table */
    const double *inv_freq; /* [rotary_dim / 2] finite, or NULL for theta_base's: scaled
                               frequencies (YaRN and the like) come as this table */
} dcp_rope_options;

/* Checks options for a head_dim and fills the defaults into *resolved (options NULL: all
   defaults). A table given in options->inv_freq is read (each entry must be finite). */
DCPDEF dcp_status dcp_rope_options_resolve(const dcp_rope_options *options, int32_t head_dim,
                                           dcp_rope_options *resolved, dcp_error *error);

/* Widest conv1d accepted, and the width of a zero-initialised params (Gated DeltaNet's). */
#define DCP_CONV1D_MAX_WIDTH 8
#define DCP_DEFAULT_CONV1D_WIDTH 4

typedef struct dcp_conv1d_params {
    int32_t channels; /* >= 1. Required. */
    int32_t width;    /* W in [1, DCP_CONV1D_MAX_WIDTH]; default DCP_DEFAULT_CONV1D_WIDTH */
    int32_t silu;     /* 0 or 1: y = silu(pre-activation) */
} dcp_conv1d_params;

/* Checks params and fills the default width into *resolved. */
DCPDEF dcp_status dcp_conv1d_params_resolve(const dcp_conv1d_params *params,
                                           dcp_conv1d_params *resolved, dcp_error *error);

#ifndef DCP_NO_REFERENCE
/* ========================================================================== CPU references
   The semantics every CUDA kernel is tested against (docs/DESIGN.md section 5): attention forward
   and backward as one step that serves plain varlen attention and every ring-CP step alike,
   LSE merging and a driver that runs the c ranks of a ring in one process (by the contracts'
   step plan), RoPE with CP positions, and the causal depthwise conv1d of Gated DeltaNet.
   Clarity before speed: fp32 tensors, double for every sum that decides accuracy (softmax
   sums, dot products, weight and bias gradients) and loops in a fixed order, so results are
   deterministic. Guarantees: padding rows and invisible keys are skipped, never multiplied by
   zero (a NaN there cannot leak); every row a call owns is written (padding rows as 0, their
   LSE as -inf); arguments are checked and reported, never asserted; only the ring driver
   allocates (through the caller's allocator). Outputs must not overlap inputs unless a
   function says so. Define DCP_NO_REFERENCE before including dcp.h to leave them out. */

/* One attention step. Per query row of the view: softmax(scale q.k) over the visible keys of
   the view (same sequence, both valid, causal mask by global position when params->causal),
   into out [rows, num_heads, head_dim] and the natural-log LSE [num_heads, rows], fp32.
   A row with no visible key, padding rows included, gets 0 and LSE -inf. Rows outside the q
   view are left untouched. view NULL: all zero. */
DCPDEF dcp_status dcp_attention_forward(const dcp_attention_params *params,
                                        const dcp_thd_layout *layout,
                                        const dcp_attention_view *view, const float *q,
                                        const float *k, const float *v, float *out,
                                        float *lse, dcp_error *error);
/* Its gradient from the final (merged) out and lse: recomputes P = exp(scale q.k - lse) and
   ADDS into dq (rows of the q view) and dk, dv (rows of the kv view), so the steps of a ring
   sum up; the caller zeroes them first. With D_i = dO_i.O_i and dS_ij = P_ij (dO_i.V_j - D_i):
   dV_j += sum_i P_ij dO_i, dQ_i += scale sum_j dS_ij K_j, dK_j += scale sum_i dS_ij Q_i.
   Rows with LSE -inf contribute nothing. */
DCPDEF dcp_status dcp_attention_backward(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout,
                                         const dcp_attention_view *view, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *dout, const float *lse, float *dq,
                                         float *dk, float *dv, dcp_error *error);

/* Merging partial results through their LSEs (only num_heads and head_dim of params are
   read). An accumulator (acc_out like out, acc_lse like lse) starts at 0 and -inf on every
   local row; merge folds in a partial (out, lse) on the rows of `half` of every sequence,
   skipping -inf on either side; finalize copies the accumulator of rank `rank` to (out, lse)
   with padding rows 0 and -inf (out and lse may be acc_out and acc_lse themselves). */
DCPDEF dcp_status dcp_attention_acc_init(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout, float *acc_out,
                                         float *acc_lse, dcp_error *error);
DCPDEF dcp_status dcp_attention_acc_merge(const dcp_attention_params *params,
                                          const dcp_thd_layout *layout, dcp_half half,
                                          const float *out, const float *lse, float *acc_out,
                                          float *acc_lse, dcp_error *error);
DCPDEF dcp_status dcp_attention_acc_finalize(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout, int32_t rank,
                                             const float *acc_out, const float *acc_lse,
                                             float *out, float *lse, dcp_error *error);

/* The ring of layout->cp ranks simulated in one process: q[r], k[r], ... are rank r's local
   buffers. Forward runs exactly the steps of dcp_ring_step_plan and merges them through the
   LSE into out[r] and lse[r] (every local row written); allocates one rank's partial out and
   lse (allocator NULL: DCP_MALLOC) and frees it before returning. Backward zeroes dq, dk, dv,
   then adds each step's gradient: dq into rank r's buffer, dk and dv into the source's, as
   the ring sends them home. No allocation. */
DCPDEF dcp_status dcp_ring_attention_forward(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout,
                                             const float *const *q, const float *const *k,
                                             const float *const *v, float *const *out,
                                             float *const *lse, const dcp_allocator *allocator,
                                             dcp_error *error);
DCPDEF dcp_status dcp_ring_attention_backward(
    const dcp_attention_params *params, const dcp_thd_layout *layout, const float *const *q,
    const float *const *k, const float *const *v, const float *const *out,
    const float *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, dcp_error *error);

/* y = RoPE(x) on the local buffer x [rows, num_heads, head_dim] of rank `rank`; padding rows
   give 0. y may be x. Backward applies the inverse rotation: dx from dy, likewise. */
DCPDEF dcp_status dcp_rope_forward(const dcp_rope_options *options,
                                   const dcp_thd_layout *layout, int32_t rank,
                                   int32_t num_heads, int32_t head_dim, const float *x,
                                   float *y, dcp_error *error);
DCPDEF dcp_status dcp_rope_backward(const dcp_rope_options *options,
                                    const dcp_thd_layout *layout, int32_t rank,
                                    int32_t num_heads, int32_t head_dim, const float *dy,
                                    float *dx, dcp_error *error);

/* Causal depthwise conv1d on a cp 1 layout, causal-conv1d's convention: x and y are
   [total_rows, channels] with total_rows >= cu_seqlens_padded[n] (a buffer tail may follow the
   last sequence), weight [channels, W], bias [channels] or NULL, and on a valid row t of a
   sequence starting at s: y[t,c] = act(bias[c] + sum_k weight[c,k] x[t-(W-1)+k, c]) where
   taps before s count as 0. Padding rows (each sequence's tail and the buffer tail) give 0
   and are never read. Backward writes dx (0 on padding rows), dweight and dbias, each a sum
   in double over sequences, then rows, in order. dbias may be NULL only when bias is; given
   without a bias it receives the gradient a bias would get. */
DCPDEF dcp_status dcp_conv1d_forward(const dcp_conv1d_params *params,
                                     const dcp_thd_layout *layout, int64_t total_rows,
                                     const float *x, const float *weight, const float *bias,
                                     float *y, dcp_error *error);
DCPDEF dcp_status dcp_conv1d_backward(const dcp_conv1d_params *params,
                                      const dcp_thd_layout *layout, int64_t total_rows,
                                      const float *x, const float *weight, const float *bias,
                                      const float *dy, float *dx, float *dweight,
                                      float *dbias, dcp_error *error);
#endif /* DCP_NO_REFERENCE */

//@@ implementation
/* ----------------------------------------------------------------- operation contracts
   The checks every attention, RoPE and conv1d entry point runs first, CPU or CUDA. */

/* Declared with the device contracts; dcp_cuda.cu and dcp_nccl.h size their buffers by it. */
DCPDEF size_t dcp_dtype_size(dcp_dtype dtype)
{
    switch (dtype) {
    case DCP_DTYPE_FLOAT32: return sizeof(float);
    case DCP_DTYPE_BFLOAT16:
    case DCP_DTYPE_FLOAT16: return sizeof(uint16_t);
    }
    return 0;
}

DCPDEF const char *dcp_dtype_name(dcp_dtype dtype)
{
    /* indexed by value: DCP_DTYPE_FLOAT32 = 0, DCP_DTYPE_BFLOAT16 = 1, DCP_DTYPE_FLOAT16 = 2 */
    static const char *const names[] = {"float32", "bfloat16", "float16"};
    const int32_t index = (int32_t)dtype;
    return index >= 0 && index < (int32_t)(sizeof names / sizeof names[0]) ? names[index]
                                                                          : "unknown";
}

static dcp_status dcp__check_flag(const char *name, int32_t value, dcp_error *error)
{
    if (value != 0 && value != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must be 0 or 1, got %d", name,
                             (int)value);
    return DCP_OK;
}

/* A resolver's own arguments: the parameters to resolve and where the result goes. */
static dcp_status dcp__check_resolve_args(const void *params, const void *resolved,
                                          dcp_error *error)
{
    if (!params) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "params must not be NULL");
    if (!resolved)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "resolved must not be NULL");
    return DCP_OK;
}

static dcp_status dcp__check_half(const char *name, dcp_half half, int32_t cp, dcp_error *error)
{
    if (half != DCP_HALF_ALL && half != DCP_HALF_FIRST && half != DCP_HALF_SECOND)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s %d is not a dcp_half", name,
                             (int)half);
    if (half != DCP_HALF_ALL && cp == 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "%s %s needs cp > 1 (at layout cp 1 a sequence has no halves)", name,
                             half == DCP_HALF_FIRST ? "DCP_HALF_FIRST" : "DCP_HALF_SECOND");
    return DCP_OK;
}

DCPDEF dcp_status dcp_attention_params_resolve(const dcp_attention_params *params,
                                               dcp_attention_params *resolved,
                                               dcp_error *error)
{
    dcp_attention_params p;
    dcp_status status;
    if ((status = dcp__check_resolve_args(params, resolved, error)) != DCP_OK) return status;
    p = *params;
    if (p.num_heads < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "num_heads must be >= 1, got %d",
                             (int)p.num_heads);
    if (p.num_kv_heads == 0) p.num_kv_heads = p.num_heads;
    if (p.num_kv_heads < 1 || p.num_heads % p.num_kv_heads != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_heads %d must be a multiple of num_kv_heads %d", (int)p.num_heads,
                             (int)p.num_kv_heads);
    if (p.head_dim < 1 || p.head_dim > DCP_MAX_HEAD_DIM)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "head_dim must be in [1, %d], got %d", DCP_MAX_HEAD_DIM,
                             (int)p.head_dim);
    if (p.softmax_scale == 0.0) p.softmax_scale = 1.0 / sqrt((double)p.head_dim);
    if (!(p.softmax_scale > 0.0 && dcp__is_finite(p.softmax_scale)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "softmax_scale must be finite and > 0, got %g", p.softmax_scale);
    if ((status = dcp__check_flag("causal", p.causal, error)) != DCP_OK) return status;
    *resolved = p;
    return dcp_error_clear(error);
}

/* A ring's size: any number of ranks in [1, DCP_MAX_RANKS]. */
static dcp_status dcp__check_ring_cp(int32_t cp, dcp_error *error)
{
    if (cp < 1 || cp > DCP_MAX_RANKS)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "cp must be in [1, %d], got %d",
                             DCP_MAX_RANKS, (int)cp);
    return DCP_OK;
}

/* The ring order (see dcp_ring_order): positions [0, evens) hold the even ranks going up,
   the rest the odd ones coming down from the largest. */
static int32_t dcp__ring_rank_at(int32_t cp, int32_t position)
{
    const int32_t evens = (cp + 1) / 2, top_odd = cp % 2 == 0 ? cp - 1 : cp - 2;
    return position < evens ? 2 * position : top_odd - 2 * (position - evens);
}

static int32_t dcp__ring_position_of(int32_t cp, int32_t rank)
{
    const int32_t evens = (cp + 1) / 2, top_odd = cp % 2 == 0 ? cp - 1 : cp - 2;
    return rank % 2 == 0 ? rank / 2 : evens + (top_odd - rank) / 2;
}

/* The rank `places` positions after rank's in the ring order (negative: before it). */
static int32_t dcp__ring_step_from(int32_t cp, int32_t rank, int32_t places)
{
    const int64_t at = ((int64_t)dcp__ring_position_of(cp, rank) + places) % cp;
    return dcp__ring_rank_at(cp, (int32_t)(at < 0 ? at + cp : at));
}

DCPDEF dcp_status dcp_ring_order(int32_t cp, int32_t position, int32_t *rank, dcp_error *error)
{
    dcp_status status;
    if (!rank) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "rank must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("position", position, cp, error)) != DCP_OK)
        return status;
    *rank = dcp__ring_rank_at(cp, position);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_ring_position(int32_t cp, int32_t rank, int32_t *position,
                                    dcp_error *error)
{
    dcp_status status;
    if (!position)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "position must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, cp, error)) != DCP_OK)
        return status;
    *position = dcp__ring_position_of(cp, rank);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_attention_view_validate(const dcp_attention_view *view, int32_t cp,
                                              dcp_error *error)
{
    dcp_attention_view v;
    dcp_status status;
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK) return status;
    if (view) v = *view;
    else memset(&v, 0, sizeof v);
    if ((status = dcp_check_rank("view.q_rank", v.q_rank, cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.q_half", v.q_half, cp, error)) != DCP_OK ||
        (status = dcp_check_rank("view.kv_rank", v.kv_rank, cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.kv_half", v.kv_half, cp, error)) != DCP_OK)
        return status;
    return dcp_error_clear(error);
}

static dcp_ring_step dcp__ring_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal)
{
    dcp_ring_step plan;
    memset(&plan, 0, sizeof plan);
    plan.view.q_rank = rank;
    plan.view.kv_rank = dcp__ring_step_from(cp, rank, -step);
    if (causal && step == 0)
        plan.causal = 1;
    else if (causal && plan.view.kv_rank < rank)
        plan.view.kv_half = DCP_HALF_FIRST; /* its chunk 2cp-1-source follows all our rows */
    else if (causal)
        plan.view.q_half = DCP_HALF_SECOND; /* our chunk `rank` precedes all of its rows */
    return plan;
}

DCPDEF dcp_status dcp_ring_step_plan(int32_t cp, int32_t rank, int32_t step, int32_t causal,
                                     dcp_ring_step *plan, dcp_error *error)
{
    dcp_status status;
    if (!plan) return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "plan must not be NULL");
    if ((status = dcp__check_ring_cp(cp, error)) != DCP_OK ||
        (status = dcp_check_rank("rank", rank, cp, error)) != DCP_OK)
        return status;
    if (step < 0 || step >= cp)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "step must be in [0, cp %d), got %d", (int)cp, (int)step);
    if ((status = dcp__check_flag("causal", causal, error)) != DCP_OK) return status;
    *plan = dcp__ring_plan(cp, rank, step, causal);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rope_options_resolve(const dcp_rope_options *options, int32_t head_dim,
                                           dcp_rope_options *resolved, dcp_error *error)
{
    dcp_rope_options o;
    int32_t i;
    if (!resolved)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "resolved must not be NULL");
    if (head_dim < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "head_dim must be >= 1, got %d",
                             (int)head_dim);
    if (options) o = *options;
    else memset(&o, 0, sizeof o);
    if (o.style != DCP_ROPE_ROTATE_HALF && o.style != DCP_ROPE_INTERLEAVED)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "style %d is not a dcp_rope_style",
                             (int)o.style);
    if (o.rotary_dim == 0) o.rotary_dim = head_dim;
    if (o.rotary_dim < 2 || o.rotary_dim > head_dim || o.rotary_dim % 2 != 0)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "rotary_dim (default head_dim) must be even and in [2, head_dim %d], "
                             "got %d",
                             (int)head_dim, (int)o.rotary_dim);
    if (o.theta_base == 0.0) o.theta_base = DCP_DEFAULT_ROPE_THETA;
    if (!(o.theta_base > 0.0 && dcp__is_finite(o.theta_base)))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "theta_base must be finite and > 0, got %g", o.theta_base);
    for (i = 0; o.inv_freq && i < o.rotary_dim / 2; i++)
        if (!dcp__is_finite(o.inv_freq[i]))
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                                 "inv_freq[%d] must be finite, got %g", (int)i, o.inv_freq[i]);
    *resolved = o;
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_conv1d_params_resolve(const dcp_conv1d_params *params,
                                           dcp_conv1d_params *resolved, dcp_error *error)
{
    dcp_conv1d_params p;
    dcp_status status;
    if ((status = dcp__check_resolve_args(params, resolved, error)) != DCP_OK) return status;
    p = *params;
    if (p.width == 0) p.width = DCP_DEFAULT_CONV1D_WIDTH;
    if (p.channels < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "channels must be >= 1, got %d",
                             (int)p.channels);
    if (p.width < 1 || p.width > DCP_CONV1D_MAX_WIDTH)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "width must be in [1, %d], got %d",
                             DCP_CONV1D_MAX_WIDTH, (int)p.width);
    if ((status = dcp__check_flag("silu", p.silu, error)) != DCP_OK) return status;
    *resolved = p;
    return dcp_error_clear(error);
}

#ifndef DCP_NO_REFERENCE
/* ------------------------------------------------------------------ CPU references: checks
   Each public reference checks every argument before it touches a buffer, so a failing call
   writes nothing. */

static dcp_status dcp__check_pointers(int32_t count, const void *const *pointers,
                                      const char *const *names, dcp_error *error)
{
    int32_t i;
    for (i = 0; i < count; i++)
        if (!pointers[i])
            return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT, "%s must not be NULL",
                                 names[i]);
    return DCP_OK;
}

/* rows x heads x dim floats must be addressable in bytes and in int64_t indices (heads and
   dim >= 1, checked before). */
static dcp_status dcp__check_elements(const char *name, int64_t rows, int64_t heads,
                                      int64_t dim, dcp_error *error)
{
    const int64_t limit = (int64_t)(SIZE_MAX / sizeof(float));
    if (rows > limit / heads / dim)
        return dcp_error_set(error, DCP_ERROR_OVERFLOW,
                             "%s: %lld rows x %lld heads x %lld dims exceed %lld elements", name,
                             (long long)rows, (long long)heads, (long long)dim, (long long)limit);
    return DCP_OK;
}

static double dcp__dot(const float *x, const float *y, int32_t n)
{
    double sum = 0.0;
    int32_t i;
    for (i = 0; i < n; i++) sum += (double)x[i] * y[i];
    return sum;
}

/* One sequence of a validated layout as a rank's local buffer holds it. */
typedef struct dcp__seq {
    int64_t valid;  /* L_i */
    int64_t padded; /* P_i */
    int64_t offset; /* first local row */
    int64_t rows;   /* local rows: P_i / cp */
} dcp__seq;

static dcp__seq dcp__thd_seq(const dcp_thd_layout *layout, int32_t i)
{
    dcp__seq s;
    s.valid = (int64_t)layout->cu_seqlens[i + 1] - layout->cu_seqlens[i];
    s.padded = (int64_t)layout->cu_seqlens_padded[i + 1] - layout->cu_seqlens_padded[i];
    s.offset = layout->cu_seqlens_padded[i] / layout->cp;
    s.rows = s.padded / layout->cp;
    return s;
}

/* The local rows [begin, end) of a sequence that a half covers. */
static void dcp__half_rows(const dcp__seq *s, dcp_half half, int64_t *begin, int64_t *end)
{
    *begin = half == DCP_HALF_SECOND ? s->rows / 2 : 0;
    *end = half == DCP_HALF_FIRST ? s->rows / 2 : s->rows;
}

/* ---------------------------------------------------------------- CPU references: attention
   Forward visits each query row of the view and each head: one pass for the largest visible
   score, one for the sums, both in double. Backward runs query-major for dQ and key-major for
   dK and dV, recomputing P in each, so every gradient element is one double sum added once
   to its fp32 buffer: no scratch memory and a fixed summation order. */

typedef struct dcp__attn {
    dcp_attention_params p; /* resolved */
    const dcp_thd_layout *layout;
    dcp_attention_view view;
    int64_t rows;  /* local rows of every buffer */
    int32_t group; /* query heads per kv head */
    const float *q, *k, *v, *out, *dout, *lse;
} dcp__attn;

static void dcp__attn_init(dcp__attn *a, const dcp_attention_params *resolved,
                           const dcp_thd_layout *layout, int64_t rows,
                           const dcp_attention_view *view)
{
    memset(a, 0, sizeof *a);
    a->p = *resolved;
    a->layout = layout;
    a->rows = rows;
    a->group = resolved->num_heads / resolved->num_kv_heads;
    if (view) a->view = *view;
}

/* Checks params, layout and view (NULL: all zero) and sizes; a valid call gets a context. */
static dcp_status dcp__attn_setup(dcp__attn *a, const dcp_attention_params *params,
                                  const dcp_thd_layout *layout, const dcp_attention_view *view,
                                  dcp_error *error)
{
    dcp_attention_params p;
    int64_t rows;
    dcp_status status;
    if ((status = dcp_attention_params_resolve(params, &p, error)) != DCP_OK) return status;
    if ((status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK) return status;
    if ((status = dcp__check_elements("q", rows, p.num_heads, p.head_dim, error)) != DCP_OK)
        return status;
    dcp__attn_init(a, &p, layout, rows, view);
    if ((status = dcp_check_rank("view.q_rank", a->view.q_rank, layout->cp, error)) != DCP_OK ||
        (status = dcp__check_half("view.q_half", a->view.q_half, layout->cp, error)) != DCP_OK ||
        (status = dcp_check_rank("view.kv_rank", a->view.kv_rank, layout->cp, error)) != DCP_OK)
        return status;
    return dcp__check_half("view.kv_half", a->view.kv_half, layout->cp, error);
}

static int64_t dcp__q_at(const dcp__attn *a, int64_t row, int32_t head)
{
    return (row * a->p.num_heads + head) * a->p.head_dim;
}

static int64_t dcp__kv_at(const dcp__attn *a, int64_t row, int32_t kv_head)
{
    return (row * a->p.num_kv_heads + kv_head) * a->p.head_dim;
}

static int64_t dcp__lse_at(const dcp__attn *a, int64_t row, int32_t head)
{
    return head * a->rows + row;
}

static int64_t dcp__q_position(const dcp__attn *a, const dcp__seq *s, int64_t q_local)
{
    return dcp_zigzag_position(s->padded, a->layout->cp, a->view.q_rank, q_local);
}

/* Whether the key at local row k_local of the kv rank is visible from a query at q_pos. */
static int dcp__attn_visible(const dcp__attn *a, const dcp__seq *s, int64_t q_pos,
                             int64_t k_local)
{
    int64_t k_pos = dcp_zigzag_position(s->padded, a->layout->cp, a->view.kv_rank, k_local);
    return q_pos < s->valid && k_pos < s->valid && (!a->p.causal || k_pos <= q_pos);
}

static double dcp__attn_score(const dcp__attn *a, int64_t q_row, int32_t head, int64_t k_row)
{
    return a->p.softmax_scale * dcp__dot(a->q + dcp__q_at(a, q_row, head),
                                         a->k + dcp__kv_at(a, k_row, head / a->group),
                                         a->p.head_dim);
}

/* The buffers of a reference pass besides the dcp__attn inputs: the forward writes out and
   lse, the backward dq, dk and dv; a merge reads a partial result into out and lse. */
typedef struct dcp__attn_outputs {
    const float *partial_out, *partial_lse;
    float *out, *lse, *dq, *dk, *dv;
} dcp__attn_outputs;

/* One (local row, head) of a pass over a view. */
typedef void (*dcp__attn_row_fn)(const dcp__attn *a, const dcp__seq *s, int64_t local,
                                 int32_t head, const dcp__attn_outputs *o);

/* row() for every local row of the half `half` of every sequence and each of `heads` heads:
   the walk of every reference pass (queries of the q view, or keys of the kv view). */
static void dcp__attn_walk(const dcp__attn *a, dcp_half half, int32_t heads, dcp__attn_row_fn row,
                           const dcp__attn_outputs *o)
{
    int32_t i, head;
    for (i = 0; i < a->layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(a->layout, i);
        int64_t local, begin, end;
        dcp__half_rows(&s, half, &begin, &end);
        for (local = begin; local < end; local++)
            for (head = 0; head < heads; head++) row(a, &s, local, head, o);
    }
}

static void dcp__attn_forward_row(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                                  int32_t head, const dcp__attn_outputs *out)
{
    const int64_t q_row = s->offset + q_local, q_pos = dcp__q_position(a, s, q_local);
    float *o = out->out + dcp__q_at(a, q_row, head);
    double acc[DCP_MAX_HEAD_DIM], max_score = -INFINITY, sum = 0.0;
    int64_t k_local, begin, end;
    int32_t d;
    dcp__half_rows(s, a->view.kv_half, &begin, &end);
    for (k_local = begin; k_local < end; k_local++)
        if (dcp__attn_visible(a, s, q_pos, k_local))
            max_score = fmax(max_score, dcp__attn_score(a, q_row, head, s->offset + k_local));
    for (d = 0; d < a->p.head_dim; d++) acc[d] = 0.0;
    for (k_local = begin; k_local < end && max_score > -INFINITY; k_local++) {
        const float *v = a->v + dcp__kv_at(a, s->offset + k_local, head / a->group);
        double p;
        if (!dcp__attn_visible(a, s, q_pos, k_local)) continue;
        p = exp(dcp__attn_score(a, q_row, head, s->offset + k_local) - max_score);
        sum += p;
        for (d = 0; d < a->p.head_dim; d++) acc[d] += p * v[d];
    }
    /* sum stays 0 when no key is visible (padding query rows included): 0 and -inf */
    for (d = 0; d < a->p.head_dim; d++) o[d] = sum > 0.0 ? (float)(acc[d] / sum) : 0.0f;
    out->lse[dcp__lse_at(a, q_row, head)] =
        sum > 0.0 ? (float)(max_score + log(sum)) : -INFINITY;
}

static void dcp__attn_forward(const dcp__attn *a, float *out, float *lse)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.out = out, o.lse = lse;
    dcp__attn_walk(a, a->view.q_half, a->p.num_heads, dcp__attn_forward_row, &o);
}

/* D_i = dO_i . O_i of one query row and head. */
static double dcp__attn_delta(const dcp__attn *a, int64_t q_row, int32_t head)
{
    return dcp__dot(a->dout + dcp__q_at(a, q_row, head), a->out + dcp__q_at(a, q_row, head),
                    a->p.head_dim);
}

/* P_ij from the final LSE and dS_ij = P_ij (dO_i . V_j - D_i) of a visible pair. */
static void dcp__attn_probs(const dcp__attn *a, int64_t q_row, int32_t head, int64_t k_row,
                            double delta, double *p, double *ds)
{
    const float *v = a->v + dcp__kv_at(a, k_row, head / a->group);
    double dp = dcp__dot(a->dout + dcp__q_at(a, q_row, head), v, a->p.head_dim);
    *p = exp(dcp__attn_score(a, q_row, head, k_row) - a->lse[dcp__lse_at(a, q_row, head)]);
    *ds = *p * (dp - delta);
}

static void dcp__attn_dq_row(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                             int32_t head, const dcp__attn_outputs *o)
{
    const int64_t q_row = s->offset + q_local, q_pos = dcp__q_position(a, s, q_local);
    double acc[DCP_MAX_HEAD_DIM], delta;
    float *g = o->dq + dcp__q_at(a, q_row, head);
    int64_t k_local, begin, end;
    int32_t d;
    if (q_pos >= s->valid || a->lse[dcp__lse_at(a, q_row, head)] == -INFINITY) return;
    delta = dcp__attn_delta(a, q_row, head);
    for (d = 0; d < a->p.head_dim; d++) acc[d] = 0.0;
    dcp__half_rows(s, a->view.kv_half, &begin, &end);
    for (k_local = begin; k_local < end; k_local++) {
        const float *k = a->k + dcp__kv_at(a, s->offset + k_local, head / a->group);
        double p, ds;
        if (!dcp__attn_visible(a, s, q_pos, k_local)) continue;
        dcp__attn_probs(a, q_row, head, s->offset + k_local, delta, &p, &ds);
        for (d = 0; d < a->p.head_dim; d++) acc[d] += ds * k[d];
    }
    for (d = 0; d < a->p.head_dim; d++) g[d] = (float)(g[d] + a->p.softmax_scale * acc[d]);
}

/* Adds one query row's share to the dK (unscaled) and dV sums of a key row. */
static void dcp__attn_dkv_pair(const dcp__attn *a, const dcp__seq *s, int64_t q_local,
                               int32_t head, int64_t k_local, double *dk_acc, double *dv_acc)
{
    const int64_t q_row = s->offset + q_local;
    const float *q = a->q + dcp__q_at(a, q_row, head);
    const float *dout = a->dout + dcp__q_at(a, q_row, head);
    double p, ds;
    int32_t d;
    if (!dcp__attn_visible(a, s, dcp__q_position(a, s, q_local), k_local) ||
        a->lse[dcp__lse_at(a, q_row, head)] == -INFINITY)
        return;
    dcp__attn_probs(a, q_row, head, s->offset + k_local, dcp__attn_delta(a, q_row, head), &p,
                    &ds);
    for (d = 0; d < a->p.head_dim; d++) {
        dk_acc[d] += ds * q[d];
        dv_acc[d] += p * dout[d];
    }
}

static void dcp__attn_dkv_row(const dcp__attn *a, const dcp__seq *s, int64_t k_local,
                              int32_t kv_head, const dcp__attn_outputs *o)
{
    float *dk = o->dk, *dv = o->dv;
    const int64_t at = dcp__kv_at(a, s->offset + k_local, kv_head);
    double dk_acc[DCP_MAX_HEAD_DIM], dv_acc[DCP_MAX_HEAD_DIM];
    int64_t q_local, begin, end;
    int32_t head, d;
    for (d = 0; d < a->p.head_dim; d++) dk_acc[d] = dv_acc[d] = 0.0;
    dcp__half_rows(s, a->view.q_half, &begin, &end);
    for (head = kv_head * a->group; head < (kv_head + 1) * a->group; head++)
        for (q_local = begin; q_local < end; q_local++)
            dcp__attn_dkv_pair(a, s, q_local, head, k_local, dk_acc, dv_acc);
    for (d = 0; d < a->p.head_dim; d++) {
        dk[at + d] = (float)(dk[at + d] + a->p.softmax_scale * dk_acc[d]);
        dv[at + d] = (float)(dv[at + d] + dv_acc[d]);
    }
}

/* dq of the q view's rows, then dk and dv of the kv view's rows (each element written by one
   row, from the inputs only: the order does not change a value). */
static void dcp__attn_backward(const dcp__attn *a, float *dq, float *dk, float *dv)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.dq = dq, o.dk = dk, o.dv = dv;
    dcp__attn_walk(a, a->view.q_half, a->p.num_heads, dcp__attn_dq_row, &o);
    dcp__attn_walk(a, a->view.kv_half, a->p.num_kv_heads, dcp__attn_dkv_row, &o);
}

/* dcp__attn_setup, then every one of the named pointers given. */
static dcp_status dcp__attn_setup_checked(dcp__attn *a, const dcp_attention_params *params,
                                          const dcp_thd_layout *layout,
                                          const dcp_attention_view *view,
                                          const char *const *names, const void *const *pointers,
                                          int32_t count, dcp_error *error)
{
    const dcp_status status = dcp__attn_setup(a, params, layout, view, error);
    return status != DCP_OK ? status : dcp__check_pointers(count, pointers, names, error);
}

DCPDEF dcp_status dcp_attention_forward(const dcp_attention_params *params,
                                        const dcp_thd_layout *layout,
                                        const dcp_attention_view *view, const float *q,
                                        const float *k, const float *v, float *out,
                                        float *lse, dcp_error *error)
{
    static const char *const names[] = {"q", "k", "v", "out", "lse"};
    const void *const pointers[] = {q, k, v, out, lse};
    dcp__attn a;
    const dcp_status status = dcp__attn_setup_checked(&a, params, layout, view, names, pointers,
                                                      DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    a.q = q, a.k = k, a.v = v;
    dcp__attn_forward(&a, out, lse);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_attention_backward(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout,
                                         const dcp_attention_view *view, const float *q,
                                         const float *k, const float *v, const float *out,
                                         const float *dout, const float *lse, float *dq,
                                         float *dk, float *dv, dcp_error *error)
{
    static const char *const names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "dk", "dv"};
    const void *const pointers[] = {q, k, v, out, dout, lse, dq, dk, dv};
    dcp__attn a;
    const dcp_status status = dcp__attn_setup_checked(&a, params, layout, view, names, pointers,
                                                      DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    a.q = q, a.k = k, a.v = v, a.out = out, a.dout = dout, a.lse = lse;
    dcp__attn_backward(&a, dq, dk, dv);
    return dcp_error_clear(error);
}

/* ------------------------------------------------------ CPU references: merging through LSE
   Two partial results over disjoint key sets combine as lse = log(e^lse_a + e^lse_b) and
   out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b, computed in double. A side at -inf saw
   no key and is skipped, so a row no step could see stays 0 and -inf. */

static void dcp__acc_clear(const dcp__attn *a, float *acc_out, float *acc_lse)
{
    const int64_t values = a->rows * a->p.num_heads * a->p.head_dim;
    const int64_t lses = a->rows * a->p.num_heads;
    int64_t i;
    for (i = 0; i < values; i++) acc_out[i] = 0.0f;
    for (i = 0; i < lses; i++) acc_lse[i] = -INFINITY;
}

static void dcp__merge_head(int32_t dim, const float *out, float lse, float *acc_out,
                            float *acc_lse)
{
    double high, low, merged;
    int32_t d;
    if (lse == -INFINITY) return;
    if (*acc_lse == -INFINITY) {
        for (d = 0; d < dim; d++) acc_out[d] = out[d];
        *acc_lse = lse;
        return;
    }
    high = fmax(*acc_lse, lse);
    low = fmin(*acc_lse, lse);
    merged = high + log1p(exp(low - high));
    for (d = 0; d < dim; d++)
        acc_out[d] = (float)(exp(*acc_lse - merged) * acc_out[d] + exp(lse - merged) * out[d]);
    *acc_lse = (float)merged;
}

static void dcp__acc_merge_row(const dcp__attn *a, const dcp__seq *s, int64_t local,
                               int32_t head, const dcp__attn_outputs *o)
{
    const int64_t at = dcp__q_at(a, s->offset + local, head);
    const int64_t lse_at = dcp__lse_at(a, s->offset + local, head);
    dcp__merge_head(a->p.head_dim, o->partial_out + at, o->partial_lse[lse_at], o->out + at,
                    o->lse + lse_at);
}

static void dcp__acc_merge(const dcp__attn *a, dcp_half half, const float *out,
                           const float *lse, float *acc_out, float *acc_lse)
{
    dcp__attn_outputs o;
    memset(&o, 0, sizeof o);
    o.partial_out = out, o.partial_lse = lse, o.out = acc_out, o.lse = acc_lse;
    dcp__attn_walk(a, half, a->p.num_heads, dcp__acc_merge_row, &o);
}

/* out and lse may be acc_out and acc_lse: each element is read before it is written. */
static void dcp__acc_finish(const dcp__attn *a, int32_t rank, const float *acc_out,
                            const float *acc_lse, float *out, float *lse)
{
    int32_t i, head, d;
    for (i = 0; i < a->layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(a->layout, i);
        int64_t local;
        for (local = 0; local < s.rows; local++) {
            const int64_t row = s.offset + local;
            const int valid = dcp_zigzag_position(s.padded, a->layout->cp, rank, local) < s.valid;
            for (head = 0; head < a->p.num_heads; head++) {
                const int64_t at = dcp__q_at(a, row, head), lse_at = dcp__lse_at(a, row, head);
                for (d = 0; d < a->p.head_dim; d++) out[at + d] = valid ? acc_out[at + d] : 0.0f;
                lse[lse_at] = valid ? acc_lse[lse_at] : -INFINITY;
            }
        }
    }
}

/* The checks of the LSE-merge entry points: the attention shape, the call's half and rank
   (DCP_HALF_ALL and 0 where a call has none) and its buffers (acc_init passes its two twice). */
static dcp_status dcp__acc_setup(dcp__attn *a, const dcp_attention_params *params,
                                 const dcp_thd_layout *layout, dcp_half half, int32_t rank,
                                 const float *acc_out, const float *acc_lse, const float *out,
                                 const float *lse, dcp_error *error)
{
    static const char *const names[] = {"acc_out", "acc_lse", "out", "lse"};
    const void *const pointers[] = {acc_out, acc_lse, out, lse};
    dcp_status status = dcp__attn_setup(a, params, layout, NULL, error);
    if (status == DCP_OK) status = dcp__check_half("half", half, layout->cp, error);
    if (status == DCP_OK) status = dcp_check_rank("rank", rank, layout->cp, error);
    if (status == DCP_OK) status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error);
    return status;
}

DCPDEF dcp_status dcp_attention_acc_init(const dcp_attention_params *params,
                                         const dcp_thd_layout *layout, float *acc_out,
                                         float *acc_lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status = dcp__acc_setup(&a, params, layout, DCP_HALF_ALL, 0, acc_out,
                                             acc_lse, acc_out, acc_lse, error);
    if (status == DCP_OK) dcp__acc_clear(&a, acc_out, acc_lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_attention_acc_merge(const dcp_attention_params *params,
                                          const dcp_thd_layout *layout, dcp_half half,
                                          const float *out, const float *lse, float *acc_out,
                                          float *acc_lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status =
        dcp__acc_setup(&a, params, layout, half, 0, acc_out, acc_lse, out, lse, error);
    if (status == DCP_OK) dcp__acc_merge(&a, half, out, lse, acc_out, acc_lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

DCPDEF dcp_status dcp_attention_acc_finalize(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout, int32_t rank,
                                             const float *acc_out, const float *acc_lse,
                                             float *out, float *lse, dcp_error *error)
{
    dcp__attn a;
    const dcp_status status = dcp__acc_setup(&a, params, layout, DCP_HALF_ALL, rank, acc_out,
                                             acc_lse, out, lse, error);
    if (status == DCP_OK) dcp__acc_finish(&a, rank, acc_out, acc_lse, out, lse);
    return status == DCP_OK ? dcp_error_clear(error) : status;
}

/* ------------------------------------------------------------ CPU references: ring attention
   The driver runs rank after rank, each through its cp steps in ring order; a real ring runs
   the ranks at once, but every rank's arithmetic, and so every result, is the same. */

/* The per-rank buffers of a simulated ring. */
typedef struct dcp__ring {
    dcp_attention_params p; /* resolved */
    const dcp_thd_layout *layout;
    int64_t rows;
    const float *const *q, *const *k, *const *v, *const *out, *const *dout, *const *lse;
} dcp__ring;

static dcp_status dcp__ring_setup(dcp__ring *ring, const dcp_attention_params *params,
                                  const dcp_thd_layout *layout, const float *const *const *buffers,
                                  const char *const *names, int32_t count, dcp_error *error)
{
    dcp__attn a;
    dcp_status status;
    int32_t i;
    if ((status = dcp__attn_setup(&a, params, layout, NULL, error)) != DCP_OK) return status;
    for (i = 0; i < count; i++)
        if ((status = dcp_check_rank_buffers(names[i], (const void *const *)buffers[i],
                                             layout->cp, error)) != DCP_OK)
            return status;
    memset(ring, 0, sizeof *ring);
    ring->p = a.p;
    ring->layout = layout;
    ring->rows = a.rows;
    return DCP_OK;
}

/* The context of step `step` on rank `rank`: the plan's view, its mask, its KV source. */
static void dcp__ring_step_attn(const dcp__ring *ring, int32_t rank, int32_t step, dcp__attn *a)
{
    const dcp_ring_step plan = dcp__ring_plan(ring->layout->cp, rank, step, ring->p.causal);
    dcp_attention_params step_params = ring->p;
    step_params.causal = plan.causal;
    dcp__attn_init(a, &step_params, ring->layout, ring->rows, &plan.view);
    a->q = ring->q[rank];
    a->k = ring->k[plan.view.kv_rank];
    a->v = ring->v[plan.view.kv_rank];
    if (ring->out) a->out = ring->out[rank];
    if (ring->dout) a->dout = ring->dout[rank];
    if (ring->lse) a->lse = ring->lse[rank];
}

static void dcp__ring_forward_rank(const dcp__ring *ring, int32_t rank, float *partial,
                                   float *out, float *lse)
{
    float *partial_lse = partial + ring->rows * ring->p.num_heads * ring->p.head_dim;
    dcp__attn a;
    int32_t step;
    dcp__attn_init(&a, &ring->p, ring->layout, ring->rows, NULL);
    dcp__acc_clear(&a, out, lse);
    for (step = 0; step < ring->layout->cp; step++) {
        dcp__ring_step_attn(ring, rank, step, &a);
        dcp__attn_forward(&a, partial, partial_lse);
        dcp__acc_merge(&a, a.view.q_half, partial, partial_lse, out, lse);
    }
    dcp__acc_finish(&a, rank, out, lse, out, lse);
}

DCPDEF dcp_status dcp_ring_attention_forward(const dcp_attention_params *params,
                                             const dcp_thd_layout *layout,
                                             const float *const *q, const float *const *k,
                                             const float *const *v, float *const *out,
                                             float *const *lse, const dcp_allocator *allocator,
                                             dcp_error *error)
{
    const float *const *buffers[5];
    static const char *const names[] = {"q", "k", "v", "out", "lse"};
    dcp__ring ring;
    float *partial;
    int32_t rank;
    dcp_status status;
    buffers[0] = q, buffers[1] = k, buffers[2] = v;
    buffers[3] = (const float *const *)out, buffers[4] = (const float *const *)lse;
    status = dcp__ring_setup(&ring, params, layout, buffers, names, DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    if (allocator && (allocator->alloc == NULL) != (allocator->free == NULL))
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "allocator needs both alloc and free, or neither");
    ring.q = q, ring.k = k, ring.v = v;
    partial = (float *)dcp__alloc_array(allocator, (size_t)ring.rows,
                                        ((size_t)ring.p.head_dim + 1) * ring.p.num_heads *
                                            sizeof(float),
                                        "ring attention partial result", error);
    if (!partial) return error ? error->status : DCP_ERROR_OUT_OF_MEMORY;
    for (rank = 0; rank < layout->cp; rank++)
        dcp__ring_forward_rank(&ring, rank, partial, out[rank], lse[rank]);
    dcp_free(allocator, partial);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_ring_attention_backward(
    const dcp_attention_params *params, const dcp_thd_layout *layout, const float *const *q,
    const float *const *k, const float *const *v, const float *const *out,
    const float *const *dout, const float *const *lse, float *const *dq, float *const *dk,
    float *const *dv, dcp_error *error)
{
    const float *const *buffers[9];
    static const char *const names[] = {"q", "k", "v", "out", "dout", "lse", "dq", "dk", "dv"};
    dcp__ring ring;
    dcp__attn a;
    int32_t rank, step;
    int64_t i, q_values, kv_values;
    dcp_status status;
    buffers[0] = q, buffers[1] = k, buffers[2] = v, buffers[3] = out, buffers[4] = dout;
    buffers[5] = lse, buffers[6] = (const float *const *)dq;
    buffers[7] = (const float *const *)dk, buffers[8] = (const float *const *)dv;
    status = dcp__ring_setup(&ring, params, layout, buffers, names, DCP__COUNT(names), error);
    if (status != DCP_OK) return status;
    ring.q = q, ring.k = k, ring.v = v, ring.out = out, ring.dout = dout, ring.lse = lse;
    q_values = ring.rows * ring.p.num_heads * ring.p.head_dim;
    kv_values = ring.rows * ring.p.num_kv_heads * ring.p.head_dim;
    for (rank = 0; rank < layout->cp; rank++) {
        for (i = 0; i < q_values; i++) dq[rank][i] = 0.0f;
        for (i = 0; i < kv_values; i++) dk[rank][i] = dv[rank][i] = 0.0f;
    }
    for (rank = 0; rank < layout->cp; rank++)
        for (step = 0; step < layout->cp; step++) {
            dcp__ring_step_attn(&ring, rank, step, &a);
            dcp__attn_backward(&a, dq[rank], dk[a.view.kv_rank], dv[a.view.kv_rank]);
        }
    return dcp_error_clear(error);
}

/* --------------------------------------------------------------------- CPU references: RoPE
   A row's angles depend on its global position only, so RoPE on a rank's zigzag rows equals
   RoPE on the whole sequence followed by the split. Backward turns by the opposite angle:
   a rotation's inverse is its transpose. */

static double dcp__rope_inv_freq(const dcp_rope_options *o, int32_t i)
{
    return o->inv_freq ? o->inv_freq[i] : pow(o->theta_base, -2.0 * i / o->rotary_dim);
}

/* Turns every pair of every head of one row by position x inv_freq (direction +1 forward,
   -1 backward) and copies the dims past rotary_dim. y may be x: a pair is read before it is
   written. */
static void dcp__rope_row(const dcp_rope_options *o, int32_t heads, int32_t dim,
                          int64_t position, double direction, const float *x, float *y)
{
    const int32_t half = o->rotary_dim / 2, interleaved = o->style == DCP_ROPE_INTERLEAVED;
    int32_t i, head, d;
    for (i = 0; i < half; i++) {
        const double angle = (double)position * dcp__rope_inv_freq(o, i);
        const double c = cos(angle), s = direction * sin(angle);
        const int32_t first = interleaved ? 2 * i : i, second = interleaved ? 2 * i + 1 : i + half;
        for (head = 0; head < heads; head++) {
            const int64_t at = (int64_t)head * dim;
            const double a = x[at + first], b = x[at + second];
            y[at + first] = (float)(a * c - b * s);
            y[at + second] = (float)(b * c + a * s);
        }
    }
    for (head = 0; head < heads; head++)
        for (d = o->rotary_dim; d < dim; d++) {
            const int64_t at = (int64_t)head * dim + d;
            y[at] = x[at];
        }
}

/* Checks the arguments of a RoPE call; on success `o` holds the resolved options. */
static dcp_status dcp__rope_setup(const dcp_rope_options *options,
                                  const dcp_thd_layout *layout, int32_t rank, int32_t heads,
                                  int32_t dim, const float *x, const float *y,
                                  const char *const *names, dcp_rope_options *o,
                                  dcp_error *error)
{
    const void *const pointers[] = {x, y};
    int64_t rows;
    dcp_status status;
    if (heads < 1 || dim < 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "num_heads and head_dim must be >= 1, got %d and %d", (int)heads,
                             (int)dim);
    if ((status = dcp_rope_options_resolve(options, dim, o, error)) != DCP_OK) return status;
    if ((status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK) return status;
    if ((status = dcp_check_rank("rank", rank, layout->cp, error)) != DCP_OK) return status;
    if ((status = dcp__check_elements(names[0], rows, heads, dim, error)) != DCP_OK)
        return status;
    return dcp__check_pointers(2, pointers, names, error);
}

static void dcp__rope_apply(const dcp_rope_options *o, const dcp_thd_layout *layout,
                            int32_t rank, int32_t heads, int32_t dim, double direction,
                            const float *x, float *y)
{
    const int64_t width = (int64_t)heads * dim;
    int64_t local, d;
    int32_t i;
    for (i = 0; i < layout->num_sequences; i++) {
        const dcp__seq s = dcp__thd_seq(layout, i);
        for (local = 0; local < s.rows; local++) {
            const int64_t position = dcp_zigzag_position(s.padded, layout->cp, rank, local);
            const int64_t at = (s.offset + local) * width;
            if (position < s.valid) {
                dcp__rope_row(o, heads, dim, position, direction, x + at, y + at);
                continue;
            }
            for (d = 0; d < width; d++) y[at + d] = 0.0f;
        }
    }
}

/* One RoPE pass: forward (direction +1, x -> y) or backward (-1, dy -> dx). */
static dcp_status dcp__rope_run(const dcp_rope_options *options, const dcp_thd_layout *layout,
                                int32_t rank, int32_t heads, int32_t dim, double direction,
                                const float *x, float *y, dcp_error *error)
{
    static const char *const forward_names[] = {"x", "y"}, *const backward_names[] = {"dy", "dx"};
    dcp_rope_options o;
    const dcp_status status =
        dcp__rope_setup(options, layout, rank, heads, dim, x, y,
                        direction > 0.0 ? forward_names : backward_names, &o, error);
    if (status != DCP_OK) return status;
    dcp__rope_apply(&o, layout, rank, heads, dim, direction, x, y);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_rope_forward(const dcp_rope_options *options,
                                   const dcp_thd_layout *layout, int32_t rank,
                                   int32_t num_heads, int32_t head_dim, const float *x,
                                   float *y, dcp_error *error)
{
    return dcp__rope_run(options, layout, rank, num_heads, head_dim, 1.0, x, y, error);
}

DCPDEF dcp_status dcp_rope_backward(const dcp_rope_options *options,
                                    const dcp_thd_layout *layout, int32_t rank,
                                    int32_t num_heads, int32_t head_dim, const float *dy,
                                    float *dx, dcp_error *error)
{
    return dcp__rope_run(options, layout, rank, num_heads, head_dim, -1.0, dy, dx, error);
}

/* ------------------------------------------------------------------- CPU references: conv1d
   A tap is skipped, not multiplied by zero, when it falls before its sequence's first row, so
   taps never cross a boundary and padding rows are never read. Backward recomputes the
   pre-activation wherever it needs it rather than storing it: no scratch memory. */

typedef struct dcp__conv {
    dcp_conv1d_params p; /* resolved */
    const dcp_thd_layout *layout;
    int64_t total_rows;
    const float *x, *weight, *bias, *dy;
} dcp__conv;

static dcp_status dcp__conv_setup(dcp__conv *cv, const dcp_conv1d_params *params,
                                  const dcp_thd_layout *layout, int64_t total_rows,
                                  dcp_error *error)
{
    dcp_conv1d_params p;
    int64_t rows;
    dcp_status status;
    if ((status = dcp_conv1d_params_resolve(params, &p, error)) != DCP_OK ||
        (status = dcp_thd_layout_validate(layout, &rows, error)) != DCP_OK)
        return status;
    if (layout->cp != 1)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "conv1d needs a layout of whole sequences (cp 1), got layout cp %d",
                             (int)layout->cp);
    if (total_rows < rows)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "total_rows %lld < cu_seqlens_padded[%d] = %lld",
                             (long long)total_rows, (int)layout->num_sequences, (long long)rows);
    if ((status = dcp__check_elements("x", total_rows, p.channels, 1, error)) != DCP_OK)
        return status;
    memset(cv, 0, sizeof *cv);
    cv->p = p;
    cv->layout = layout;
    cv->total_rows = total_rows;
    return DCP_OK;
}

/* bias + the taps of valid row t (a sequence starting at row `start`) in channel c. */
static double dcp__conv_pre(const dcp__conv *cv, int64_t start, int64_t t, int32_t c)
{
    const int32_t width = cv->p.width;
    double sum = cv->bias ? cv->bias[c] : 0.0;
    int32_t k;
    for (k = 0; k < width; k++) {
        const int64_t source = t - (width - 1) + k;
        if (source >= start)
            sum += (double)cv->weight[(int64_t)c * width + k] * cv->x[source * cv->p.channels + c];
    }
    return sum;
}

static double dcp__sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* d loss / d pre-activation of valid row t in channel c. */
static double dcp__conv_dpre(const dcp__conv *cv, int64_t start, int64_t t, int32_t c)
{
    double grad = cv->dy[t * cv->p.channels + c], pre, s;
    if (!cv->p.silu) return grad;
    pre = dcp__conv_pre(cv, start, t, c);
    s = dcp__sigmoid(pre);
    return grad * s * (1.0 + pre * (1.0 - s));
}

static void dcp__conv_forward(const dcp__conv *cv, float *y)
{
    const int32_t channels = cv->p.channels;
    int64_t i, t;
    int32_t seq, c;
    for (i = 0; i < cv->total_rows * channels; i++) y[i] = 0.0f;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++)
            for (c = 0; c < channels; c++) {
                const double pre = dcp__conv_pre(cv, s.offset, t, c);
                y[t * channels + c] = (float)(cv->p.silu ? pre * dcp__sigmoid(pre) : pre);
            }
    }
}

/* dweight and dbias of one channel, summed over sequences, then rows, then taps. */
static void dcp__conv_param_grads(const dcp__conv *cv, int32_t c, float *dweight, float *dbias)
{
    const int32_t width = cv->p.width;
    double dw[DCP_CONV1D_MAX_WIDTH] = {0.0}, db = 0.0;
    int64_t t;
    int32_t seq, k;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++) {
            const double g = dcp__conv_dpre(cv, s.offset, t, c);
            db += g;
            for (k = 0; k < width; k++)
                if (t - (width - 1) + k >= s.offset)
                    dw[k] += g * cv->x[(t - (width - 1) + k) * cv->p.channels + c];
        }
    }
    for (k = 0; k < width; k++) dweight[(int64_t)c * width + k] = (float)dw[k];
    if (dbias) dbias[c] = (float)db;
}

/* dx of valid row t: the rows t + (W-1) - k of the same sequence that read it through tap k. */
static double dcp__conv_dx_at(const dcp__conv *cv, const dcp__seq *s, int64_t t, int32_t c)
{
    const int32_t width = cv->p.width;
    double sum = 0.0;
    int32_t k;
    for (k = 0; k < width; k++) {
        const int64_t reader = t + (width - 1) - k;
        if (reader < s->offset + s->valid)
            sum += (double)cv->weight[(int64_t)c * width + k] *
                   dcp__conv_dpre(cv, s->offset, reader, c);
    }
    return sum;
}

static void dcp__conv_backward(const dcp__conv *cv, float *dx, float *dweight, float *dbias)
{
    const int32_t channels = cv->p.channels;
    int64_t i, t;
    int32_t seq, c;
    for (c = 0; c < channels; c++) dcp__conv_param_grads(cv, c, dweight, dbias);
    for (i = 0; i < cv->total_rows * channels; i++) dx[i] = 0.0f;
    for (seq = 0; seq < cv->layout->num_sequences; seq++) {
        const dcp__seq s = dcp__thd_seq(cv->layout, seq);
        for (t = s.offset; t < s.offset + s.valid; t++)
            for (c = 0; c < channels; c++)
                dx[t * channels + c] = (float)dcp__conv_dx_at(cv, &s, t, c);
    }
}

DCPDEF dcp_status dcp_conv1d_forward(const dcp_conv1d_params *params,
                                     const dcp_thd_layout *layout, int64_t total_rows,
                                     const float *x, const float *weight, const float *bias,
                                     float *y, dcp_error *error)
{
    static const char *const names[] = {"x", "weight", "y"};
    const void *const pointers[] = {x, weight, y};
    dcp__conv cv;
    dcp_status status;
    if ((status = dcp__conv_setup(&cv, params, layout, total_rows, error)) != DCP_OK ||
        (status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error)) != DCP_OK)
        return status;
    cv.x = x, cv.weight = weight, cv.bias = bias;
    dcp__conv_forward(&cv, y);
    return dcp_error_clear(error);
}

DCPDEF dcp_status dcp_conv1d_backward(const dcp_conv1d_params *params,
                                      const dcp_thd_layout *layout, int64_t total_rows,
                                      const float *x, const float *weight, const float *bias,
                                      const float *dy, float *dx, float *dweight,
                                      float *dbias, dcp_error *error)
{
    static const char *const names[] = {"x", "weight", "dy", "dx", "dweight"};
    const void *const pointers[] = {x, weight, dy, dx, dweight};
    dcp__conv cv;
    dcp_status status;
    if ((status = dcp__conv_setup(&cv, params, layout, total_rows, error)) != DCP_OK ||
        (status = dcp__check_pointers(DCP__COUNT(names), pointers, names, error)) != DCP_OK)
        return status;
    if (bias && !dbias)
        return dcp_error_set(error, DCP_ERROR_INVALID_ARGUMENT,
                             "dbias must not be NULL when bias is given");
    cv.x = x, cv.weight = weight, cv.bias = bias, cv.dy = dy;
    dcp__conv_backward(&cv, dx, dweight, dbias);
    return dcp_error_clear(error);
}
#endif /* DCP_NO_REFERENCE */

