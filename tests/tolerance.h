/* tolerance.h - the one rule by which the GPU tests compare a result with its CPU reference
   (tests/cuda_test_util.h includes it; tests/test_tolerance.c tests the rule itself, without a
   GPU). Plain C99 on top of dcp.h (for dcp_dtype) and test.h (for the seed).

   Why not element-wise: an element-wise relative bound with a tiny floor fails on the handful
   of elements whose reference is near zero, where a correct kernel's error is the rounding of
   the large terms that cancelled there (fp32 conv1d dx with sums in another order, a bf16
   attention output next to zero). What the attention libraries do instead, and what this is:

     norm:     ||got - ref||_2 / ||ref||_2  <=  t.norm
     max-abs:  max |got - ref|              <=  t.max_ulps ulps of max|ref| in the precision
                                                the kernel computes in (t.precision_bits)

   The norm bound holds the bulk of the tensor to the precision; the max-abs bound, scaled to
   the data rather than to each element, catches a bug confined to a few rows that the norm of
   a large tensor would dilute (a mask off by one row, a dropped tile). Non-finite references
   must be matched exactly (-inf stays -inf, NaN stays NaN: rows a kernel must not touch), and
   a non-finite result where the reference is finite always fails. On failure it prints both
   measured errors, both bounds, the worst element and the run's seed.

   The presets and why their numbers (k = max_ulps):
   - tolerance_of(dtype), for a result computed in dtype: bf16 norm 1e-2, fp16 3e-3 (the bf16
     tensor-core attention rounds P to bf16, 2^-9 relative, before P.V, and rounds its output
     once); fp32 1e-5 (the same sums in another order). k = 8: a correct kernel's worst element
     carries a few roundings of the largest values (the output's half ulp, the inputs of its
     last product), at most ~2-3 ulps of max|ref|; 8 leaves 3x room, while a wrong row moves
     its elements by O(|ref|) = 2^(bits-1) ulps (128 in bf16).
   - tolerance_sum(): fp32 sums over up to 65,536 rows (conv1d dweight, dbias). Their rounding
     error grows like sqrt(n) ulps of the partial sums: ~1-4 ulps of max|ref| for partials of
     <= 1,024 rows; k = 32 leaves >= 8x room, while a dropped block of 256 rows moves an element
     by ~16 sigma, thousands of ulps.
   - tolerance_lse(): the float32 log-sum-exp of attention. It carries the fp32 rounding of a
     d-term dot product (~sqrt(128) ulps of the score) and of a sum of n exponentials, so k =
     64 ulps of max|LSE| (~6e-5 at |LSE| ~ 10); a mask off by one key moves an LSE by
     log(1 + 1/n) >= 5e-4 at n <= 2,000 keys, and a wrong scale by O(1).
   - tolerance_exact(): bit-equal values (initialisation, conversion).
   - tolerance_scaled(t, f): GPU against GPU (the virtual ring against single-GPU attention):
     each side carries its own error, so by the triangle inequality both bounds double (f = 2). */
#ifndef DCP_TEST_TOLERANCE_H
#define DCP_TEST_TOLERANCE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "test.h"

typedef struct test_tolerance {
    const char *name;   /* printed on failure: "bf16", "fp32 sum", ... */
    double norm;        /* ||got - ref||_2 / ||ref||_2 at most this */
    double max_ulps;    /* max |got - ref| at most this many ulps of max|ref| ... */
    int precision_bits; /* ... in a float of this many significand bits (8, 11 or 24) */
} test_tolerance;

#define TOLERANCE_BF16_BITS 8
#define TOLERANCE_FP16_BITS 11
#define TOLERANCE_FP32_BITS 24
#define TOLERANCE_ELEMENT_ULPS 8.0
#define TOLERANCE_SUM_ULPS 32.0
#define TOLERANCE_LSE_ULPS 64.0

static TEST_MAYBE_UNUSED test_tolerance tolerance_make(const char *name, double norm,
                                                       double max_ulps, int precision_bits)
{
    test_tolerance t;
    t.name = name;
    t.norm = norm;
    t.max_ulps = max_ulps;
    t.precision_bits = precision_bits;
    return t;
}

/* A result computed in dtype (the kernel's arithmetic, not necessarily its output type). */
static TEST_MAYBE_UNUSED test_tolerance tolerance_of(dcp_dtype dtype)
{
    if (dtype == DCP_DTYPE_BFLOAT16)
        return tolerance_make("bf16", 1e-2, TOLERANCE_ELEMENT_ULPS, TOLERANCE_BF16_BITS);
    if (dtype == DCP_DTYPE_FLOAT16)
        return tolerance_make("fp16", 3e-3, TOLERANCE_ELEMENT_ULPS, TOLERANCE_FP16_BITS);
    return tolerance_make("fp32", 1e-5, TOLERANCE_ELEMENT_ULPS, TOLERANCE_FP32_BITS);
}

static TEST_MAYBE_UNUSED test_tolerance tolerance_sum(void)
{
    return tolerance_make("fp32 sum", 1e-5, TOLERANCE_SUM_ULPS, TOLERANCE_FP32_BITS);
}

static TEST_MAYBE_UNUSED test_tolerance tolerance_lse(void)
{
    return tolerance_make("fp32 lse", 1e-5, TOLERANCE_LSE_ULPS, TOLERANCE_FP32_BITS);
}

static TEST_MAYBE_UNUSED test_tolerance tolerance_exact(void)
{
    return tolerance_make("exact", 0.0, 0.0, TOLERANCE_FP32_BITS);
}

static TEST_MAYBE_UNUSED test_tolerance tolerance_scaled(test_tolerance t, double factor)
{
    t.norm *= factor;
    t.max_ulps *= factor;
    return t;
}

/* The spacing of floats of `bits` significand bits at |x| (0 at 0). */
static TEST_MAYBE_UNUSED double tolerance_ulp(double x, int bits)
{
    int exponent;
    if (!(fabs(x) > 0.0) || !isfinite(x)) return 0.0;
    (void)frexp(fabs(x), &exponent); /* |x| = m 2^exponent, m in [0.5, 1) */
    return ldexp(1.0, exponent - bits);
}

/* What the rule measured; compare() fills it and decides from it. */
typedef struct tolerance_report {
    double norm_error;      /* ||got - ref|| / ||ref|| (0 when both are 0, inf when only ref is) */
    double max_error;       /* max |got - ref| over finite references */
    double max_ref;         /* max |ref| over finite references */
    double max_bound;       /* max_ulps ulps of max_ref */
    int64_t worst;          /* index of max_error (-1: none) */
    int64_t nonfinite_bad;  /* non-finite mismatches */
    int64_t first_nonfinite_bad;
} tolerance_report;

static TEST_MAYBE_UNUSED int tolerance_measure(const float *got, const float *ref, int64_t count,
                                               test_tolerance t, tolerance_report *r)
{
    double error_squares = 0.0, ref_squares = 0.0;
    int64_t i;
    r->max_error = r->max_ref = 0.0;
    r->worst = r->first_nonfinite_bad = -1;
    r->nonfinite_bad = 0;
    for (i = 0; i < count; i++) {
        const double g = got[i], e = ref[i];
        double error;
        if (!isfinite(e) || !isfinite(g)) {
            const int same = g == e || (e != e && g != g); /* -inf stays -inf, NaN stays NaN */
            if (!same && r->nonfinite_bad++ == 0) r->first_nonfinite_bad = i;
            continue;
        }
        error = fabs(g - e);
        error_squares += error * error;
        ref_squares += e * e;
        if (fabs(e) > r->max_ref) r->max_ref = fabs(e);
        if (error > r->max_error || r->worst < 0) r->max_error = error, r->worst = i;
    }
    r->norm_error = ref_squares > 0.0 ? sqrt(error_squares / ref_squares)
                                      : (error_squares > 0.0 ? INFINITY : 0.0);
    r->max_bound = t.max_ulps * tolerance_ulp(r->max_ref, t.precision_bits);
    return r->nonfinite_bad == 0 && r->norm_error <= t.norm && r->max_error <= r->max_bound;
}

/* 1 when got matches ref under t; otherwise prints what was measured against which bound. */
static TEST_MAYBE_UNUSED int compare(const char *what, const float *got, const float *ref,
                                     int64_t count, test_tolerance t)
{
    tolerance_report r;
    if (tolerance_measure(got, ref, count, t, &r)) return 1;
    fprintf(stderr,
            "%s: %s rule failed over %lld elements (seed %llu):\n"
            "  norm error %.3g (bound %.3g)%s\n"
            "  max |error| %.3g (bound %.3g = %g ulps of max|ref| %.6g)%s\n",
            what, t.name, (long long)count, (unsigned long long)test_seed_value, r.norm_error,
            t.norm, r.norm_error <= t.norm ? "" : "  <-- over", r.max_error, r.max_bound,
            t.max_ulps, r.max_ref, r.max_error <= r.max_bound ? "" : "  <-- over");
    if (r.worst >= 0)
        fprintf(stderr, "  worst element [%lld]: got %.9g, expected %.9g\n", (long long)r.worst,
                got[r.worst], ref[r.worst]);
    if (r.nonfinite_bad)
        fprintf(stderr, "  %lld non-finite mismatches, first [%lld]: got %.9g, expected %.9g\n",
                (long long)r.nonfinite_bad, (long long)r.first_nonfinite_bad,
                got[r.first_nonfinite_bad], ref[r.first_nonfinite_bad]);
    return 0;
}

#endif
