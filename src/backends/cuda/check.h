// CUDA runtime errors as trainkit errors: what failed, the runtime's words, and where.
//
//   tk::cuda::check(cudaMemsetAsync(p, 0, bytes, stream), "cudaMemsetAsync", node.name);
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "trainkit/core/error.h"

namespace tk::cuda {

inline void check(cudaError_t e, const char* call, const std::string& where) {
  if (e == cudaSuccess) return;
  throw Error(std::string(call) + " failed: " + cudaGetErrorString(e) + " (" + where +
              "; CUDA_LAUNCH_BLOCKING=1 makes the error point at the kernel that caused it)");
}

}  // namespace tk::cuda
