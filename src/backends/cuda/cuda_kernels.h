// The CUDA backend's kernels, registered per (DeviceKind::cuda, op, dtypes) in graph/kernel.h's table. Programs do
// not run on CUDA devices yet (the Backend object, device arenas and streams are the next step of issue 13); the
// table lets the coverage test (tests/cuda/test_cuda_coverage.cpp) say which ops have CUDA kernels.
#pragma once
#include <string_view>
#include <vector>

#include "graph/op.h"

namespace tk::cuda {

// Registers every CUDA kernel (built with TK_CUDA=ON; a no-op otherwise).
void register_kernels();

// The ops with a float32 CPU kernel that have no CUDA kernel yet, each with the reason; the coverage test fails
// when an op has neither. It may not hold the ops the default MLP and the tutorial CNN use once issue 13 is done.
struct Excluded {
  graph::Op op;
  std::string_view why;
};
const std::vector<Excluded>& excluded_ops();

}  // namespace tk::cuda
