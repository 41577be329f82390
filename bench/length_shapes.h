/* length_shapes.h - the shapes of sequence-length batches the planner is measured on: the
   plan-time targets and the Pareto and bimodal rows of bench/plan_bench.c, and the random
   workloads of tests/test_plan_guarantee.c, so that the targets and the guarantee are checked
   on the same shapes. Each shape is scaled by a typical length T and clipped to [1, longest]:
   - narrow: log-uniform in [2T/3, 4T/3], lengths within a factor of two of each other;
   - lognormal: Megatron's convention (dcp_lognormal), mean T, sigma LENGTH_LOGNORMAL_SIGMA,
     at least T / LENGTH_LOGNORMAL_FLOOR;
   - pareto: Pareto(LENGTH_PARETO_ALPHA) from T / LENGTH_PARETO_MEAN_OVER_MIN (its mean is T);
   - bimodal: LENGTH_BIMODAL_SHORT_FRACTION log-uniform in [T/8, T], the rest in [8T, 64T];
   - mixture: each sample one of the four above, uniformly.
   One draw sequence per shape (bench/RESULTS.md's rows depend on it). Host-only C99 after
   dcp.h; every length comes out of dcp.h's generator (dcp_rng). */
#ifndef DCP_BENCH_LENGTH_SHAPES_H
#define DCP_BENCH_LENGTH_SHAPES_H

#include <math.h>

typedef enum length_shape {
    LENGTH_NARROW,
    LENGTH_LOGNORMAL,
    LENGTH_PARETO,
    LENGTH_BIMODAL,
    LENGTH_MIXTURE,
    LENGTH_SHAPES
} length_shape;

static const char *const length_shape_names[LENGTH_SHAPES] = {"narrow", "lognormal", "pareto",
                                                              "bimodal", "mixture"};

#define LENGTH_LOGNORMAL_SIGMA 1.4
#define LENGTH_LOGNORMAL_FLOOR 16
#define LENGTH_PARETO_ALPHA 1.2
/* a Pareto(alpha) of minimum m has mean m alpha / (alpha - 1): 6 m for alpha 1.2 */
#define LENGTH_PARETO_MEAN_OVER_MIN 6
#define LENGTH_BIMODAL_SHORT_FRACTION 0.9
/* the bimodal modes: [T / 8, T] and [8 T, 64 T] */
#define LENGTH_BIMODAL_SPAN 8

static int64_t length_clip(double length, int64_t longest)
{
    if (!(length >= 1.0)) return 1;
    return length >= (double)longest ? longest : (int64_t)length;
}

/* Log-uniform in [lo, hi] scaled, clipped to [1, longest] (both ends clipped first, so that
   the range is never empty). */
static int64_t length_loguniform(dcp_rng *rng, double lo, double hi, int64_t longest)
{
    int64_t low = length_clip(lo, longest), high = length_clip(hi, longest), length = low;
    dcp_rng_loguniform_length(rng, low, high, &length, NULL);
    return length;
}

/* One length of the shape (not the mixture), typical length `typical` >= 1. */
static int64_t length_of_shape(dcp_rng *rng, length_shape shape, int64_t typical, int64_t longest)
{
    const double t = (double)typical;
    int64_t length = 1;
    switch (shape) {
    case LENGTH_NARROW: return length_loguniform(rng, 2.0 * t / 3.0, 4.0 * t / 3.0, longest);
    case LENGTH_LOGNORMAL: {
        dcp_lognormal d;
        d.mean = t;
        d.sigma = LENGTH_LOGNORMAL_SIGMA;
        d.max_length = longest;
        d.min_length = length_clip(t / LENGTH_LOGNORMAL_FLOOR, longest);
        dcp_rng_lognormal_length(rng, &d, &length, NULL);
        return length;
    }
    case LENGTH_PARETO: {
        double u = 1.0 - dcp_rng_uniform(rng); /* (0, 1] */
        return length_clip(t / LENGTH_PARETO_MEAN_OVER_MIN * pow(u, -1.0 / LENGTH_PARETO_ALPHA),
                           longest);
    }
    case LENGTH_BIMODAL:
        if (dcp_rng_uniform(rng) < LENGTH_BIMODAL_SHORT_FRACTION)
            return length_loguniform(rng, t / LENGTH_BIMODAL_SPAN, t, longest);
        return length_loguniform(rng, t * LENGTH_BIMODAL_SPAN,
                                 t * LENGTH_BIMODAL_SPAN * LENGTH_BIMODAL_SPAN, longest);
    default: return length_clip(t, longest);
    }
}

/* count lengths of the shape from rng. */
static void length_batch(dcp_rng *rng, length_shape shape, int64_t typical, int64_t longest,
                         int64_t *lengths, int32_t count)
{
    int32_t i;
    for (i = 0; i < count; i++) {
        length_shape one = shape;
        if (shape == LENGTH_MIXTURE) one = (length_shape)dcp_rng_below(rng, LENGTH_MIXTURE);
        lengths[i] = length_of_shape(rng, one, typical, longest);
    }
}

#endif
