/* The dcp.h implementation for build/libdcp_cuda.so (with dcp_cuda.o): what the Python benches
   load through ctypes. */
#define DCP_IMPLEMENTATION
#include "../dcp.h"
