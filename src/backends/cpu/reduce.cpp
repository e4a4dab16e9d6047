// Reductions on the CPU: Reduce over any set of axes and ArgReduce along one (backends/math/reduce.h's math), on
// float32 (16-bit widened) and int32/int64. The
// input is seen as kept axes x reduced axes (math::Strided layouts); the output elements are split between threads
// and each is reduced in index order, so results do not depend on the thread count (logsumexp over contiguous rows:
// the exps in vector lanes, vector_exp.h, summed in double lanes).
#include "backends/math/reduce.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vector_exp.h"
#include "backends/strided.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;
using graph::ReduceFn;

// The kept axes (operand 0: x's strides along the output's axes) and the reduced ones (x's strides along them).
struct ReduceLayout {
  math::Strided kept, reduced;
  int64_t outputs = 1, count = 1;
};

ReduceLayout reduce_layout(const Shape& x, uint32_t axes) {
  ReduceLayout l;
  int64_t stride = 1;
  int64_t xstride[graph::kMaxRank] = {};
  for (int d = x.rank() - 1; d >= 0; --d) xstride[d] = stride, stride *= x[d];
  for (int d = 0; d < x.rank(); ++d) {
    math::Strided& s = (axes & (1u << d)) ? l.reduced : l.kept;
    s.dims[s.rank] = x[d];
    s.stride[0][s.rank] = xstride[d];
    ++s.rank;
    ((axes & (1u << d)) ? l.count : l.outputs) *= x[d];
  }
  for (math::Strided* s : {&l.kept, &l.reduced}) {
    if (s->rank == 0) s->dims[s->rank++] = 1;
    backends::merge_axes(*s, 1);
  }
  return l;
}

// Reduced axes that form one block [a, b) with kept axes after it: x is (outer, red, inner) and the output
// (outer, inner). Each output element is still reduced in index order (the bits of the strided loop, and of the CUDA
// kernel), but rows of `inner` are read contiguously into blocks of accumulators instead of one strided walk per
// output: a column sum over (4096, 512) reads memory once, in order.
struct Block {
  bool ok = false;
  int64_t outer = 1, red = 1, inner = 1;
};
Block block_of(const Shape& x, uint32_t axes) {
  Block b;
  int first = -1, last = -1;
  for (int d = 0; d < x.rank(); ++d)
    if (axes & (1u << d)) {
      if (first < 0) first = d;
      if (last >= 0 && d != last + 1) return b;  // not one block
      last = d;
    }
  if (first < 0) return b;
  for (int d = 0; d < first; ++d) b.outer *= x[d];
  for (int d = first; d <= last; ++d) b.red *= x[d];
  for (int d = last + 1; d < x.rank(); ++d) b.inner *= x[d];
  b.ok = b.inner > 1;
  return b;
}

template <ReduceFn F>
void reduce_columns(const float* x, float* y, const Block& b) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (b.inner + kBlock - 1) / kBlock;
  parallel_for(
      b.outer * blocks,
      [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t o = k / blocks, i0 = (k % blocks) * kBlock, n = std::min(kBlock, b.inner - i0);
          const float* xo = x + o * b.red * b.inner + i0;
          float* yo = y + o * b.inner + i0;
          if constexpr (F == ReduceFn::sum || F == ReduceFn::mean || F == ReduceFn::prod) {
            double acc[kBlock];
            for (int64_t j = 0; j < n; ++j) acc[j] = F == ReduceFn::prod ? 1.0 : 0.0;
            for (int64_t r = 0; r < b.red; ++r) {
              const float* row = xo + r * b.inner;
              if constexpr (F == ReduceFn::prod) {
                for (int64_t j = 0; j < n; ++j) acc[j] *= static_cast<double>(row[j]);
              } else {
#pragma omp simd
                for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(row[j]);
              }
            }
            const double scale = F == ReduceFn::mean ? 1.0 / static_cast<double>(b.red) : 1.0;
            for (int64_t j = 0; j < n; ++j) yo[j] = static_cast<float>(F == ReduceFn::mean ? acc[j] * scale : acc[j]);
          } else {
            float m[kBlock];
            for (int64_t j = 0; j < n; ++j) m[j] = xo[j];
            for (int64_t r = 1; r < b.red; ++r)
              for (int64_t j = 0; j < n; ++j)
                m[j] = F == ReduceFn::min ? math::nan_min(m[j], xo[r * b.inner + j])
                                          : math::nan_max(m[j], xo[r * b.inner + j]);
            if constexpr (F == ReduceFn::logsumexp) {
              double acc[kBlock] = {};
              for (int64_t r = 0; r < b.red; ++r)
                for (int64_t j = 0; j < n; ++j)
                  if (m[j] == m[j] && !math::infinite(m[j]))
                    acc[j] += static_cast<double>(std::exp(xo[r * b.inner + j] - m[j]));
              for (int64_t j = 0; j < n; ++j)
                if (m[j] == m[j] && !math::infinite(m[j])) m[j] += static_cast<float>(std::log(acc[j]));
            }
            for (int64_t j = 0; j < n; ++j) yo[j] = m[j];
          }
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(b.red * kBlock, 1)));
}

template <ReduceFn F>
void reduce_fn(const KernelArgs& a) {
  const float* x = a.input<float>(0);
  float* y = a.output<float>();  // (outputs)
  const ReduceLayout l = reduce_layout(a.in_shape(0), a.node.attrs.axes);
  if (l.count == 0) {  // an empty reduction: sum 0, prod 1, mean NaN (max/min of nothing is a shape error)
    const float v = F == ReduceFn::prod ? 1.0f : F == ReduceFn::sum ? 0.0f : F == ReduceFn::logsumexp ? -INFINITY : NAN;
    for (int64_t o = 0; o < l.outputs; ++o) y[o] = v;
    return;
  }
  if (const Block b = block_of(a.in_shape(0), a.node.attrs.axes); b.ok) return reduce_columns<F>(x, y, b);
  const bool one_run = l.reduced.rank == 1;  // the reduced elements of an output are equally spaced
  const int64_t run_stride = l.reduced.stride[0][0];
  if constexpr (F == ReduceFn::logsumexp) {
    if (one_run && run_stride == 1) {  // contiguous rows (log_softmax's): the exps in vector lanes (vector_exp.h)
      parallel_for(
          l.outputs,
          [&](int64_t o0, int64_t o1) {
            for (int64_t o = o0; o < o1; ++o) y[o] = logsumexp_row(x + math::strided_offset(l.kept, 0, o), l.count);
          },
          std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.count, 1)));
      return;
    }
  }
  // Reduced elements equally spaced (contiguous when they are the last axes): one loop per output.
  parallel_for(
      l.outputs,
      [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const float* xo = x + math::strided_offset(l.kept, 0, o);
          y[o] = one_run ? math::reduce_strided<F>(xo, l.count, run_stride)
                         : math::reduce_offsets<F>(xo, l.reduced, l.count);  // axes that do not merge into one run
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.count, 1)));
}

void reduce(const KernelArgs& a) {
  switch (a.node.attrs.reduce) {
#define TK_CASE(name)  \
  case ReduceFn::name: \
    return reduce_fn<ReduceFn::name>(a);
    TK_REDUCE_FNS(TK_CASE)
#undef TK_CASE
    case ReduceFn::kCount:
      break;
  }
  unknown_function(a.node, "attrs.reduce");
}

// Integers: each output reduced over its strided elements in index order, outputs split between threads.
template <ReduceFn F, typename T>
void reduce_integers_fn(const KernelArgs& a) {
  const T* x = a.input<T>(0);
  T* y = a.output<T>();  // (outputs)
  const ReduceLayout l = reduce_layout(a.in_shape(0), a.node.attrs.axes);
  parallel_for(
      l.outputs,
      [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          y[o] = math::reduce_integers<F>(x + math::strided_offset(l.kept, 0, o), l.reduced, l.count);
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(l.count, 1)));
}

template <typename T>
void reduce_integers(const KernelArgs& a) {
  switch (a.node.attrs.reduce) {
    case ReduceFn::sum:
      return reduce_integers_fn<ReduceFn::sum, T>(a);
    case ReduceFn::prod:
      return reduce_integers_fn<ReduceFn::prod, T>(a);
    case ReduceFn::max:
      return reduce_integers_fn<ReduceFn::max, T>(a);
    case ReduceFn::min:
      return reduce_integers_fn<ReduceFn::min, T>(a);
    default:
      break;
  }
  unknown_function(a.node, "attrs.reduce (sum, prod, max or min of integers)");
}

// (outer, n, inner) -> (outer, inner): the index along the middle axis.
template <typename T>
void arg_reduce(const KernelArgs& a) {
  const Shape& xs = a.in_shape(0);
  const int axis = a.node.attrs.axis < 0 ? a.node.attrs.axis + xs.rank() : a.node.attrs.axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= xs[d];
  for (int d = axis + 1; d < xs.rank(); ++d) inner *= xs[d];
  const int64_t n = xs[axis];
  const T* x = a.input<T>(0);
  int32_t* y = a.output<int32_t>();
  const bool max = a.node.attrs.reduce == ReduceFn::max;
  parallel_for(
      outer * inner,
      [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t o = k / inner, i = k % inner;
          y[k] = math::arg_extreme(x + o * n * inner + i, n, inner, max);
        }
      },
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)));
}

}  // namespace

void register_reduce_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::Reduce, DType::f32, reduce);
  graph::register_kernel(DeviceKind::cpu, Op::ArgReduce, DType::f32, arg_reduce<float>);
  graph::register_kernel(DeviceKind::cpu, Op::Reduce, DType::i32, reduce_integers<int32_t>);
  graph::register_kernel(DeviceKind::cpu, Op::ArgReduce, DType::i32, arg_reduce<int32_t>);
  graph::register_kernel(DeviceKind::cpu, Op::Reduce, DType::i64, reduce_integers<int64_t>);
  graph::register_kernel(DeviceKind::cpu, Op::ArgReduce, DType::i64, arg_reduce<int64_t>);
}

}  // namespace tk::cpu
