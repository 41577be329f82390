/* libFuzzer harness for the cost model: three doubles (any bit pattern: NaN, infinities,
   denormals, both signs) and a few lengths through dcp_plan_create and dcp_plan_simulate. A
   plan comes back exactly when all three are 0 or in [DCP_MIN_COST_COEFF, DCP_MAX_COST_COEFF],
   its times are then finite, and nothing ever crashes or hits undefined behaviour (the harness
   runs under UBSan, which stops at an overflowing float-to-int conversion). `make fuzz`. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <float.h>
#include <stdlib.h>

#define MAX_FUZZ_SAMPLES 16
#define FUZZ_RANKS 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int supported(double v)
{
    return v == 0.0 || (v >= DCP_MIN_COST_COEFF && v <= DCP_MAX_COST_COEFF);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dcp_config config = dcp_config_init();
    int64_t lengths[MAX_FUZZ_SAMPLES];
    int32_t count = 0;
    dcp_plan *plan = NULL;
    dcp_plan_stats stats;
    dcp_error error;
    dcp_status status;
    double coefficients[3];
    if (size < sizeof coefficients) return 0;
    memcpy(coefficients, data, sizeof coefficients);
    data += sizeof coefficients;
    size -= sizeof coefficients;
    /* the rest: 4-byte lengths, 1 .. 2^31 - 1 */
    while (size >= 4 && count < MAX_FUZZ_SAMPLES) {
        uint32_t v;
        memcpy(&v, data, 4);
        lengths[count++] = (int64_t)(v & 0x7fffffffu) + ((v & 0x7fffffffu) == 0);
        data += 4;
        size -= 4;
    }
    if (count == 0) lengths[count++] = 4096;
    config.ranks = FUZZ_RANKS;
    config.max_tokens_per_rank = DCP_MAX_SAMPLE_LENGTH;
    config.cost.attn_coeff = coefficients[0];
    config.cost.linear_coeff = coefficients[1];
    config.cost.ring_step_cost = coefficients[2];
    status = dcp_plan_create(&config, lengths, count, &plan, &error);
    if (supported(coefficients[0]) && supported(coefficients[1]) && supported(coefficients[2])) {
        if (status != DCP_OK) abort();
        if (dcp_plan_simulate(plan, NULL, &stats, &error) != DCP_OK) abort();
        if (!(stats.step_seconds >= 0.0 && stats.step_seconds <= DBL_MAX)) abort();
        if (!(stats.efficiency > 0.0 && stats.efficiency <= 1.0 + 1e-9)) abort();
    } else if (status == DCP_OK || plan != NULL || error.message[0] == '\0') {
        abort();
    }
    dcp_plan_destroy(plan);
    return 0;
}
