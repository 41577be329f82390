/* GPU tests: CUDA kernels against the CPU references of dcp.h. Built by `make` everywhere
   (nvcc is on every machine); where no CUDA device exists each test reports
   "no CUDA device: skipped". */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#include "test.h"

static int gpu_available(void)
{
    int32_t devices = 0;
    dcp_error error;
    if (dcp_cuda_device_count(&devices, &error) != DCP_OK) {
        fprintf(stderr, "%s\n", error.message);
        return 0;
    }
    return devices > 0;
}

static void device_count_query(void)
{
    int32_t devices = -1;
    CHECK_EQ(dcp_cuda_device_count(&devices, NULL), DCP_OK);
    CHECK(devices >= 0);
    CHECK_EQ(dcp_cuda_device_count(NULL, NULL), DCP_ERROR_INVALID_ARGUMENT);
    if (!gpu_available()) test_skip("no CUDA device: skipped");
}

int main(int argc, char **argv)
{
    static const test_case tests[] = {{"device_count_query", device_count_query}};
    return test_main(tests, TEST_COUNT(tests), argc, argv);
}
