/* dcp_cuda.cu - the CUDA kernels of libdcp, one translation unit.

   Build: nvcc -O2 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a \
          -c dcp_cuda.cu -o dcp_cuda.o      (or `make`, as build/dcp_cuda.o)
   and link it with the file that defines DCP_IMPLEMENTATION. Every kernel has a CPU reference
   in dcp.h with the same contract; tests/test_cuda.cu compares them. Entry points take device
   pointers and a stream and return a dcp_status; none allocates in a hot path. */
#include "dcp.h"

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

/* dcp.h's helpers live in the user's implementation file; this unit fills errors itself. */
static dcp_status dcp_cuda__fail(dcp_error *error, dcp_status status, const char *format, ...)
{
    if (error) {
        va_list args;
        va_start(args, format);
        vsnprintf(error->message, sizeof error->message, format, args);
        va_end(args);
        error->status = status;
    }
    return status;
}

extern "C" dcp_status dcp_cuda_device_count(int32_t *count, dcp_error *error)
{
    int devices = 0;
    cudaError_t result;
    if (!count)
        return dcp_cuda__fail(error, DCP_ERROR_INVALID_ARGUMENT, "count must not be NULL");
    result = cudaGetDeviceCount(&devices);
    /* no driver or no device is an answer (zero), not a failure */
    if (result == cudaErrorNoDevice || result == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        devices = 0;
    } else if (result != cudaSuccess)
        return dcp_cuda__fail(error, DCP_ERROR_CUDA, "cudaGetDeviceCount: %s (%d)",
                              cudaGetErrorString(result), (int)result);
    *count = devices;
    if (error) {
        error->status = DCP_OK;
        error->message[0] = '\0';
    }
    return DCP_OK;
}
