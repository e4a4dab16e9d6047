// Gather (an embedding lookup), its gradient and OneHot on the CPU. Around the axis, params are (outer, rows, inner)
// and the output (outer, indices, inner). Every index is checked before anything is read: one outside the table is an
// InvalidArgument naming its position, its value and the table's size. The gradient adds dy's slices into the rows
// the indices name in index order, each output element written by one thread: deterministic, no atomics.
#include "backends/math/gather.h"

#include <cstring>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/device_errors.h"
#include "backends/widen.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

struct Around {
  int64_t outer = 1, rows = 1, inner = 1, count = 1;  // count: the number of indices
};
Around around(const Shape& table, const Shape& indices, int axis) {
  Around g;
  if (axis < 0) axis += table.rank();
  for (int d = 0; d < axis; ++d) g.outer *= table[d];
  for (int d = axis + 1; d < table.rank(); ++d) g.inner *= table[d];
  g.rows = table[axis];
  g.count = indices.numel();
  return g;
}

// The message is the CUDA kernels' too (backends/device_errors.h), and so is the scan (backends/math/gather.h).
template <typename I>
void check_indices(const KernelArgs& a, const I* idx, int64_t count, int64_t rows) {
  const int64_t j = math::first_outside(idx, count, rows, 0, 1);
  if (j < count)
    throw InvalidArgument(backends::gather_index_message(graph::op_name(a.node.op), a.node.name,
                                                         static_cast<int64_t>(idx[j]), j, a.in_shape(1), rows));
}

template <typename I>
void gather(const KernelArgs& a) {
  const Around g = around(a.in_shape(0), a.in_shape(1), a.node.attrs.axis);
  const I* idx = static_cast<const I*>(a.in[1]);
  check_indices(a, idx, g.count, g.rows);
  const size_t unit = dtype_size(a.out_dtype) * static_cast<size_t>(g.inner);
  const auto* p = static_cast<const char*>(a.in[0]);  // (outer, rows, inner)
  auto* y = static_cast<char*>(a.out);                // (outer, count, inner)
  parallel_for(
      g.outer * g.count,
      [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t o = k / g.count, j = k % g.count;
          std::memcpy(y + static_cast<size_t>(k) * unit,
                      p + (static_cast<size_t>(o * g.rows) + static_cast<size_t>(idx[j])) * unit, unit);
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(g.inner, 1)));
}

template <typename I>
void gather_grad_typed(const KernelArgs& a) {
  const Around g = around(a.node.shape, a.in_shape(1), a.node.attrs.axis);
  const I* idx = static_cast<const I*>(a.in[1]);
  check_indices(a, idx, g.count, g.rows);
  const float* dy = a.input<float>(0);  // (outer, count, inner)
  float* dx = a.output<float>();        // (outer, rows, inner)
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(a.node.shape.numel()));
  // Threads split (outer, inner) columns; each walks the indices in order.
  const int64_t block = 64, blocks = (g.inner + block - 1) / block;
  parallel_for(
      g.outer * blocks,
      [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t o = k / blocks, i0 = (k % blocks) * block, i1 = std::min(g.inner, i0 + block);
          for (int64_t j = 0; j < g.count; ++j) {
            float* row = dx + (o * g.rows + static_cast<int64_t>(idx[j])) * g.inner;
            const float* src = dy + (o * g.count + j) * g.inner;
#pragma omp simd
            for (int64_t i = i0; i < i1; ++i) row[i] += src[i];
          }
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(g.count * block, 1)));
}

template <typename I>
void one_hot_typed(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel(), depth = a.node.attrs.depth;
  const I* idx = static_cast<const I*>(a.in[0]);
  float* y = a.output<float>();  // (n, depth)
  std::memset(y, 0, sizeof(float) * static_cast<size_t>(n * depth));
  for (int64_t j = 0; j < n; ++j)
    if (idx[j] >= 0 && idx[j] < depth) y[j * depth + static_cast<int64_t>(idx[j])] = 1.0f;
}

// The index dtype read at run time: one function for int32 and int64 indices, so the 16-bit kernels that widen.h
// wraps around it (which pass the indices through) serve both.
void gather_grad(const KernelArgs& a) {
  a.in_dtypes[1] == DType::i64 ? gather_grad_typed<int64_t>(a) : gather_grad_typed<int32_t>(a);
}
void one_hot(const KernelArgs& a) {
  a.in_dtypes[0] == DType::i64 ? one_hot_typed<int64_t>(a) : one_hot_typed<int32_t>(a);
}

}  // namespace

void register_gather_kernels() {
  using graph::KernelSignature;
  using graph::register_kernel;
  for (int t = 0; t < kDTypeCount; ++t) {  // rows of bytes: every dtype
    const auto dt = static_cast<DType>(t);
    register_kernel(DeviceKind::cpu, Op::Gather, KernelSignature({dt, DType::i32}, dt), gather<int32_t>);
    register_kernel(DeviceKind::cpu, Op::Gather, KernelSignature({dt, DType::i64}, dt), gather<int64_t>);
  }
  for (DType i : {DType::i32, DType::i64}) {
    register_kernel(DeviceKind::cpu, Op::GatherGrad, KernelSignature({DType::f32, i}, DType::f32), gather_grad);
    register_kernel(DeviceKind::cpu, Op::OneHot, KernelSignature({i}, DType::f32), one_hot);
  }
  // int64 indices in 16 bits: widen.h's wrapper (registered later for the int32 signatures) around the same kernel.
  for (DType t : {DType::f16, DType::bf16}) {
    register_kernel(DeviceKind::cpu, Op::GatherGrad, KernelSignature({t, DType::i64}, t),
                    backends::Widened<DeviceKind::cpu>::kernel);
    register_kernel(DeviceKind::cpu, Op::OneHot, KernelSignature({DType::i64}, t),
                    backends::Widened<DeviceKind::cpu>::kernel);
  }
}

}  // namespace tk::cpu
