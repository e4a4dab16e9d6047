// The CUDA backend's kernels, registered per (DeviceKind::cuda, op, dtypes) in graph/kernel.h's table by the CUDA
// Backend (cuda_backend.h). The coverage test (tests/test_cuda_backend_host.cpp) checks that every op has a kernel or
// a declared reason not to (excluded_ops).
#pragma once
#include <string_view>
#include <vector>

#include "graph/op.h"

namespace tk::graph {
struct Graph;
struct KernelArgs;
}  // namespace tk::graph

namespace tk::cuda {

// Registers every CUDA kernel (built with TK_CUDA=ON; a no-op otherwise).
void register_kernels();

// The bias gradient a kernel writes as its second output (graph/fuse.h, attrs.side_output: FusedMatMul with the
// relu_grad epilogue, MaxPool2DGrad, ReluGrad): db(n) = the column sums of its output y(rows, n), by the BiasGrad
// kernel's launch queued right after the op's own (the same bits as the BiasGrad node; not yet a cuBLASLt
// DRELU_BGRAD epilogue). Its partials follow the `before` bytes of the op's own workspace.
size_t side_bias_grad_workspace(const graph::Graph& g, int node, size_t before);
void launch_side_bias_grad(const graph::KernelArgs& a, const float* y, size_t before);

// The ops with a float32 CPU kernel that have no CUDA kernel yet, each with the reason; the coverage test fails
// when an op has neither. It holds none of the ops the default MLP and the tutorial CNN use (tested).
struct Excluded {
  graph::Op op;
  std::string_view why;
};
const std::vector<Excluded>& excluded_ops();

}  // namespace tk::cuda
