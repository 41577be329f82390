/* calibrate - fits the planner's cost model (attn_coeff, linear_coeff, ring_step_cost) to this
   GPU and a model's sizes, and prints what to paste: a dcp_config block and a dcp-plan flag
   line. What is timed (bench/layer_timer.h): one layer's attention forward + backward (our
   kernels; cp > 1 through the virtual ring, ranks one after another) plus the linear layers'
   GEMM stand-in on each rank's tokens, over the grid of bench/calibrate_grid.h: documents of
   256 ... 131072 tokens alone and in packs of 16K, 64K, 128K tokens at cp 1, and ring groups at
   cp 2, 4, 8. Every measurement's model terms come from dcp_cost_group_terms (the planner's
   own accounting), the fit from dcp_cost_fit_measurements (relative residuals). Then the
   residuals per measurement, per document length and per CP size: a term the model lacks
   (a per-document launch cost, tile quantisation of short documents) shows as a trend there.
   Last, a held-out lognormal pack the fit never saw, at cp 1 and 4, model against measurement.

   Usage: build/calibrate [layer options] [--max-tokens N]
   --max-tokens caps the grid's largest group (default 131072) for smaller GPUs.
   Prints "no CUDA device: skipped" and exits 0 without a GPU. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "bench_util.h"
#include "calibrate_grid.h"
#include "layer_timer.h"

#include <math.h>

#define MAX_BUCKETS 32
/* The held-out check: a lognormal pack (attention_bench's mix) the fit never saw, at cp 1 and
   HELD_OUT_CP, priced by the fitted model. */
#define HELD_OUT_TOKENS 65536
#define HELD_OUT_CP 4
#define HELD_OUT_SEED 1
static const dcp_lognormal held_out_mix = {4096.0, 1.1, 128, 16384};

typedef struct calibrate_row {
    calibrate_point point;
    double attention_seconds, linear_seconds;
    dcp_cost_measurement m;
} calibrate_row;

/* Times one grid point: the group's attention, and cp times one rank's linear part. */
static void measure_point(layer_timer *t, const calibrate_point *p, calibrate_row *row)
{
    int64_t lengths[CALIBRATE_MAX_DOCUMENTS], padded[CALIBRATE_MAX_DOCUMENTS], stored = 0;
    dcp_config config = calibrate_config();
    int32_t i;
    for (i = 0; i < p->documents; i++) {
        lengths[i] = p->document;
        BENCH_DCP(dcp_padded_length(&config, p->document, p->cp, &padded[i], &bench_error_));
        stored += padded[i];
    }
    row->point = *p;
    BENCH_DCP(calibrate_point_terms(p, &row->m, &bench_error_));
    row->attention_seconds = layer_timer_attention_seconds(t, lengths, padded, p->documents, p->cp);
    row->linear_seconds = p->cp * layer_timer_linear_seconds(t, stored / p->cp);
    row->m.seconds = row->attention_seconds + row->linear_seconds;
}

/* Lengths of the held-out pack: lognormal draws until HELD_OUT_TOKENS (the last one cut). */
static int32_t held_out_lengths(int64_t *lengths)
{
    int64_t draws[CALIBRATE_MAX_DOCUMENTS], total = 0;
    int32_t n = 0;
    BENCH_DCP(dcp_lengths_lognormal(&held_out_mix, HELD_OUT_SEED, draws, CALIBRATE_MAX_DOCUMENTS,
                                    &bench_error_));
    for (; n < CALIBRATE_MAX_DOCUMENTS && total < HELD_OUT_TOKENS; n++) {
        lengths[n] = draws[n] < HELD_OUT_TOKENS - total ? draws[n] : HELD_OUT_TOKENS - total;
        total += lengths[n];
    }
    return n;
}

/* Measures the held-out pack at cp 1 and HELD_OUT_CP and prints model against measurement. */
static void print_held_out(layer_timer *t, const dcp_cost_model *cost)
{
    int64_t lengths[CALIBRATE_MAX_DOCUMENTS], padded[CALIBRATE_MAX_DOCUMENTS];
    const int32_t sizes[2] = {1, HELD_OUT_CP}, n = held_out_lengths(lengths);
    dcp_config config = calibrate_config();
    int32_t s, i;
    printf("\nheld out (not fitted): lognormal pack of %d tokens, %d documents\n",
           HELD_OUT_TOKENS, (int)n);
    for (s = 0; s < 2; s++) {
        const int32_t cp = sizes[s];
        dcp_cost_measurement m;
        int64_t stored = 0;
        for (i = 0; i < n; i++) {
            BENCH_DCP(dcp_padded_length(&config, lengths[i], cp, &padded[i], &bench_error_));
            stored += padded[i];
        }
        BENCH_DCP(dcp_cost_group_terms(&config, lengths, n, cp, &m, &bench_error_));
        m.attn_units *= cp, m.linear_units *= cp, m.ring_steps *= cp;
        m.seconds = layer_timer_attention_seconds(t, lengths, padded, n, cp) +
                    cp * layer_timer_linear_seconds(t, stored / cp);
        printf("  cp %d: measured %.3f ms, model %.3f ms, residual %+.2f%%\n", (int)cp,
               m.seconds * 1e3, dcp_cost_measurement_seconds(cost, &m) * 1e3,
               100.0 * (dcp_cost_measurement_seconds(cost, &m) / m.seconds - 1.0));
    }
}

static double relative_residual(const dcp_cost_model *cost, const dcp_cost_measurement *m)
{
    return dcp_cost_measurement_seconds(cost, m) / m->seconds - 1.0;
}

static void print_rows(const calibrate_row *rows, int32_t n, const dcp_cost_model *cost)
{
    int32_t i;
    printf("\n%3s %7s %5s %8s | %10s %10s %10s | %10s %9s\n", "cp", "doc", "docs", "tokens",
           "attn ms", "linear ms", "total ms", "model ms", "residual");
    for (i = 0; i < n; i++) {
        const calibrate_row *r = &rows[i];
        printf("%3d %7lld %5d %8lld | %10.3f %10.3f %10.3f | %10.3f %8.2f%%\n", (int)r->point.cp,
               (long long)r->point.document, (int)r->point.documents,
               (long long)r->point.document * r->point.documents, r->attention_seconds * 1e3,
               r->linear_seconds * 1e3, r->m.seconds * 1e3,
               dcp_cost_measurement_seconds(cost, &r->m) * 1e3,
               100.0 * relative_residual(cost, &r->m));
    }
}

/* Residuals grouped by a key (document length or cp): count, mean (signed) and rms. A mean
   that drifts with the key is a term the model lacks. */
static void print_buckets(const char *title, const calibrate_row *rows, int32_t n,
                          const dcp_cost_model *cost, int by_cp)
{
    int64_t keys[MAX_BUCKETS];
    int32_t buckets = 0, b, i;
    for (i = 0; i < n; i++) {
        int64_t key = by_cp ? rows[i].point.cp : rows[i].point.document;
        for (b = 0; b < buckets && keys[b] != key; b++) {}
        if (b == buckets && buckets < MAX_BUCKETS) keys[buckets++] = key;
    }
    printf("\nresiduals by %s\n%9s %5s %9s %9s %9s\n", title, title, "n", "mean", "rms", "max");
    for (b = 0; b < buckets; b++) {
        double sum = 0.0, squares = 0.0, worst = 0.0;
        int32_t count = 0;
        for (i = 0; i < n; i++) {
            double r;
            if ((by_cp ? rows[i].point.cp : rows[i].point.document) != keys[b]) continue;
            r = relative_residual(cost, &rows[i].m);
            sum += r, squares += r * r, count++;
            if (fabs(r) > worst) worst = fabs(r);
        }
        printf("%9lld %5d %8.2f%% %8.2f%% %8.2f%%\n", (long long)keys[b], (int)count,
               100.0 * sum / count, 100.0 * sqrt(squares / count), 100.0 * worst);
    }
}

static void print_result(const dcp_cost_fit *fit)
{
    const dcp_cost_model *c = &fit->cost, *e = &fit->standard_error;
    printf("\nfit over %d measurements (relative least squares, coefficients >= 0):\n",
           (int)fit->count);
    printf("  attn_coeff     %.6g s per token^2   (standard error %.2g)\n", c->attn_coeff,
           e->attn_coeff);
    printf("  linear_coeff   %.6g s per token     (standard error %.2g)\n", c->linear_coeff,
           e->linear_coeff);
    printf("  ring_step_cost %.6g s per ring step (standard error %.2g)\n", c->ring_step_cost,
           e->ring_step_cost);
    printf("  residuals: rms %.2f%%, max %.2f%% (measurement %d); conditioning %.3g%s\n",
           100.0 * fit->rms_relative_residual, 100.0 * fit->max_relative_residual,
           (int)fit->max_residual_index, fit->conditioning,
           fit->zero_terms ? "; some terms clipped at 0 (the data want them negative)" : "");
    printf("\none layer, forward + backward: the planner needs only the ratios (multiply all "
           "three by the layer count for seconds per step).\n");
    printf("\nconfig block:\n");
    printf("    config.cost.attn_coeff = %.6g;\n", c->attn_coeff);
    printf("    config.cost.linear_coeff = %.6g;\n", c->linear_coeff);
    printf("    config.cost.ring_step_cost = %.6g;\n", c->ring_step_cost);
    printf("\ndcp-plan flags:\n    --attn-coeff %.6g --linear-coeff %.6g --ring-step-cost %.6g\n",
           c->attn_coeff, c->linear_coeff, c->ring_step_cost);
}

static int usage(const char *program)
{
    fprintf(stderr, "usage: %s [options]\n%s  --max-tokens N        largest group (default %d)\n",
            program, layer_usage, CALIBRATE_MAX_DOCUMENT);
    return 2;
}

int main(int argc, char **argv)
{
    static calibrate_row rows[CALIBRATE_MAX_POINTS];
    static dcp_cost_measurement measurements[CALIBRATE_MAX_POINTS];
    calibrate_point points[CALIBRATE_MAX_POINTS];
    layer_shape shape = layer_shape_default();
    int32_t max_tokens = CALIBRATE_MAX_DOCUMENT, n, i;
    int devices = 0, a;
    layer_timer timer;
    dcp_cost_fit fit;
    dcp_error error;
    for (a = 1; a < argc; a++) {
        int taken = layer_parse_option(&shape, argc, argv, &a);
        if (taken < 0) return usage(argv[0]);
        if (taken) continue;
        if (!strcmp(argv[a], "--max-tokens") && a + 1 < argc) {
            if (!layer_parse_int("--max-tokens", argv[++a], &max_tokens)) return usage(argv[0]);
            continue;
        }
        return usage(argv[0]);
    }
    if (!layer_shape_resolve(&shape)) return usage(argv[0]);
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("no CUDA device: skipped\n");
        return 0;
    }
    bench_device_line();
    layer_shape_print(&shape);
    n = calibrate_grid(max_tokens, points);
    layer_timer_init(&timer, &shape, max_tokens, max_tokens, CALIBRATE_MAX_DOCUMENTS);
    for (i = 0; i < n; i++) {
        measure_point(&timer, &points[i], &rows[i]);
        measurements[i] = rows[i].m;
    }
    if (dcp_cost_fit_measurements(measurements, n, NULL, &fit, &error) != DCP_OK) {
        fprintf(stderr, "fit: %s\n", error.message);
        return 1;
    }
    print_rows(rows, n, &fit.cost);
    print_buckets("doc", rows, n, &fit.cost, 0);
    print_buckets("cp", rows, n, &fit.cost, 1);
    /* padding at cp 4 adds under 2 cp rows a document */
    if (max_tokens >= HELD_OUT_TOKENS + 2 * HELD_OUT_CP * CALIBRATE_MAX_DOCUMENTS)
        print_held_out(&timer, &fit.cost);
    layer_timer_destroy(&timer);
    print_result(&fit);
    return 0;
}
