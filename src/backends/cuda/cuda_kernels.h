// The CUDA backend's kernels, registered per (DeviceKind::cuda, op, dtypes) in graph/kernel.h's table by the CUDA
// Backend (cuda_backend.h). The coverage test (tests/test_cuda_backend_host.cpp) checks that every op has a kernel or
// a declared reason not to (excluded_ops).
#pragma once
#include <string_view>
#include <vector>

#include "graph/op.h"

namespace tk::cuda {

// Registers every CUDA kernel (built with TK_CUDA=ON; a no-op otherwise).
void register_kernels();

// The ops with a float32 CPU kernel that have no CUDA kernel yet, each with the reason; the coverage test fails
// when an op has neither. It holds none of the ops the default MLP and the tutorial CNN use (tested).
struct Excluded {
  graph::Op op;
  std::string_view why;
};
const std::vector<Excluded>& excluded_ops();

}  // namespace tk::cuda
