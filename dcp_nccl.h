/* dcp_nccl.h - the NCCL layer of libdcp (header-only, stb style). v0.1.0

   Placeholder of the layout issue: the communicator set, the per-microbatch switch, reroute
   and ring exchange arrive with the NCCL issue. It already compiles as C and under nvcc on top
   of nccl.h and the CUDA runtime, and `make test` checks that it does.

   Use: #define DCP_NCCL_IMPLEMENTATION in one file after including dcp.h. */
#ifndef DCP_NCCL_H
#define DCP_NCCL_H

#include "dcp.h"

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The NCCL version this header was compiled against, as NCCL_VERSION_CODE. */
int dcp_nccl_compiled_version(void);

#ifdef __cplusplus
}
#endif

#endif /* DCP_NCCL_H */

#ifdef DCP_NCCL_IMPLEMENTATION
#ifndef DCP_NCCL_IMPLEMENTATION_INCLUDED
#define DCP_NCCL_IMPLEMENTATION_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

int dcp_nccl_compiled_version(void) { return NCCL_VERSION_CODE; }

#ifdef __cplusplus
}
#endif

#endif
#endif
