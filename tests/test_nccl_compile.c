/* dcp_nccl.h must compile as C and under nvcc with -Wall -Wextra -Werror (the Makefile builds
   this file both ways, to objects: linking NCCL is the NCCL issue's GPU test). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
#define DCP_NCCL_IMPLEMENTATION
#include "../dcp_nccl.h"

int dcp_nccl_compile_check(void);
int dcp_nccl_compile_check(void) { return dcp_nccl_compiled_version() > 0; }
