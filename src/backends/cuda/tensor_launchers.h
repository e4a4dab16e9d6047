// Launchers of the general tensor ops' CUDA kernels (tensor_ops.cu): plain C++ signatures over the shared math of
// backends/math/ (unary.h, binary.h, reduce.h, strided.h), so tensor_kernels.cpp (host compiler) registers them and
// only the kernels are compiled by nvcc. Each queues on `stream` and returns; a launch error throws tk::Error.
//
//   tk::cuda::launch_unary(tk::graph::UnaryFn::gelu, x, y, n, 0.0f, 0.0f, sm_count, stream);
#pragma once
#include <cstdint>

#include "backends/device_error_record.h"
#include "backends/math/strided.h"
#include "graph/tensor_fns.h"

namespace tk::cuda {

using Stream = void*;  // cudaStream_t

// y(n) = f(x); dx(n) = dy * f'(x)
void launch_unary(graph::UnaryFn f, const float* x, float* y, int64_t n, float p0, float p1, int sm_count,
                  Stream stream);
void launch_unary_grad(graph::UnaryFn f, const float* dy, const float* x, float* dx, int64_t n, float p0, float p1,
                       int sm_count, Stream stream);
// y = f(a, b) over a broadcast layout of `total` output elements (operands 0: a, 1: b); Compare writes bool.
void launch_binary(graph::BinaryFn f, const float* a, const float* b, float* y, const math::Strided& s, int64_t total,
                   int sm_count, Stream stream);
void launch_compare(graph::BinaryFn f, const float* a, const float* b, bool* y, const math::Strided& s, int64_t total,
                    int sm_count, Stream stream);
// y = cond ? a : b (operands 0, 1, 2), elements of `elem_bytes` (1, 2, 4 or 8) copied
void launch_where(const bool* cond, const void* a, const void* b, void* y, int elem_bytes, const math::Strided& s,
                  int64_t total, int sm_count, Stream stream);
// y(total) = x read at strided_offset(s, 0, i): BroadcastTo and Transpose
void launch_gather_strided(const void* x, void* y, int elem_bytes, const math::Strided& s, int64_t total, int sm_count,
                           Stream stream);
// y = x with `fill` around it (Pad): rank, y's and x's dimensions, padding before each axis
struct PadGeo {
  int rank = 0;
  int64_t ydims[graph::kMaxRank] = {}, xdims[graph::kMaxRank] = {}, before[graph::kMaxRank] = {};
};
void launch_pad(const void* x, void* y, int elem_bytes, const PadGeo& g, uint64_t fill_bits, int64_t total,
                int sm_count, Stream stream);
// y(outputs) = f over the reduced elements of each output (kept: x's strides along the output's axes; reduced: along
// the reduced axes, `count` elements), in index order (backends/math/reduce.h)
void launch_reduce(graph::ReduceFn f, const float* x, float* y, const math::Strided& kept, const math::Strided& reduced,
                   int64_t outputs, int64_t count, int sm_count, Stream stream);
// y(outer, inner) = index of the first max / min along the middle axis of x(outer, n, inner)
void launch_arg_reduce(bool max, const float* x, int32_t* y, int64_t outer, int64_t n, int64_t inner, int sm_count,
                       Stream stream);
// The same two with `group_threads` (32 or 256: launch_geometry.h's reduce_group_threads) cooperating on each output
// (reduce_groups.cu): the same results, sums rounded in a fixed tree instead of index order.
void launch_reduce_groups(graph::ReduceFn f, int group_threads, const float* x, float* y, const math::Strided& kept,
                          const math::Strided& reduced, int64_t outputs, int64_t count, int sm_count, Stream stream);
void launch_arg_reduce_groups(bool max, int group_threads, const float* x, int32_t* y, int64_t outer, int64_t n,
                              int64_t inner, int sm_count, Stream stream);
// Records in *record (host memory the device writes: device_errors_cuda.h) the first of idx[0..count) outside
// [0, rows), as `site`; the host throws it as the CPU kernel's InvalidArgument at the next synchronization. Launched
// before Gather and GatherGrad.
void launch_check_indices(const void* idx, int idx_bytes, int64_t count, int64_t rows,
                          backends::DeviceErrorRecord* record, int32_t site, Stream stream);
// y(outer, count, inner) = table(outer, rows, inner)[:, idx, :]; an index outside [0, rows) gives a row of NaN
// (floats; zeros for other dtypes; launch_check_indices reports it) and never a read outside the table. idx_bytes: 4
// (int32) or 8 (int64).
void launch_gather(const void* table, const void* idx, int idx_bytes, void* y, int elem_bytes, bool is_float,
                   int64_t outer, int64_t rows, int64_t inner, int64_t count, int sm_count, Stream stream);
// dx(outer, rows, inner) = dy(outer, count, inner) summed into the rows the indices name, in index order: one thread
// per (outer, inner) element walks the indices (deterministic, no atomics); indices outside the table are skipped
// (launch_check_indices reports them).
void launch_gather_grad(const float* dy, const void* idx, int idx_bytes, float* dx, int64_t outer, int64_t rows,
                        int64_t inner, int64_t count, int sm_count, Stream stream);
// y(n, depth) = 1 at the index, 0 elsewhere
void launch_one_hot(const void* idx, int idx_bytes, float* y, int64_t n, int64_t depth, int sm_count, Stream stream);

// LayerNormalization fused over x (rows, n) (backends/math/layer_norm.h): stats (rows, 2) [mean, rstd] one thread per
// row; y one thread per element; dx one thread per row; [dgamma; dbeta] (2, n) one thread per column, rows in order
// in double.
void launch_layer_norm_stats(const float* x, float* stats, int64_t rows, int64_t n, float eps, int sm_count,
                             Stream stream);
void launch_layer_norm_apply(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                             int64_t rows, int64_t n, int sm_count, Stream stream);
void launch_layer_norm_input_grad(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                                  int64_t rows, int64_t n, int sm_count, Stream stream);
void launch_layer_norm_gamma_grad(const float* dy, const float* x, const float* stats, float* sums, int64_t rows,
                                  int64_t n, int sm_count, Stream stream);

// y[0] = *learning_rate, or *iterations + 1 when learning_rate is null (StepValue: read on the device)
void launch_step_value(const float* learning_rate, const int64_t* iterations, float* y, Stream stream);

}  // namespace tk::cuda
