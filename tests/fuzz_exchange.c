/* libFuzzer harness for the plan and view deserializers. Each input is tried twice: as it is
   (the preamble and checksum checks) and with its size field and checksum repaired, so that
   mutations reach the count and invariant checks behind them. Accepted input must give an
   object that validates and serializes back to the same bytes. Built and run by `make fuzz`. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_plan(const uint8_t *data, size_t size)
{
    dcp_plan *plan = NULL;
    dcp_error error;
    if (dcp_plan_deserialize(data, size, NULL, &plan, &error) == DCP_OK) {
        size_t again = 0;
        uint8_t *copy = (uint8_t *)malloc(size);
        if (!copy || dcp_plan_validate(plan, NULL) != DCP_OK ||
            dcp_plan_serialize(plan, copy, size, &again, NULL) != DCP_OK || again != size ||
            memcmp(copy, data, size) != 0)
            abort();
        free(copy);
    } else if (plan != NULL || error.message[0] == '\0') {
        abort();
    }
    dcp_plan_destroy(plan);
}

static void check_view(const uint8_t *data, size_t size)
{
    dcp_rank_view *view = NULL;
    dcp_error error;
    if (dcp_rank_view_deserialize(data, size, NULL, &view, &error) == DCP_OK) {
        size_t again = 0;
        uint8_t *copy = (uint8_t *)malloc(size);
        if (!copy || dcp_rank_view_validate(view, NULL) != DCP_OK ||
            dcp_rank_view_serialize(view, copy, size, &again, NULL) != DCP_OK || again != size ||
            memcmp(copy, data, size) != 0)
            abort();
        free(copy);
    } else if (view != NULL || error.message[0] == '\0') {
        abort();
    }
    dcp_rank_view_destroy(view);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *repaired;
    dcp__writer w;
    check_plan(data, size);
    check_view(data, size);
    if (size < DCP__PREAMBLE_BYTES + DCP__CHECKSUM_BYTES) return 0;
    repaired = (uint8_t *)malloc(size);
    if (!repaired) return 0;
    memcpy(repaired, data, size);
    w.data = repaired;
    w.capacity = size;
    w.size = 16; /* the total-size field */
    dcp__put(&w, size, 8);
    w.size = size - DCP__CHECKSUM_BYTES;
    dcp__put(&w, dcp__fnv1a(repaired, size - DCP__CHECKSUM_BYTES), 8);
    check_plan(repaired, size);
    check_view(repaired, size);
    free(repaired);
    return 0;
}
