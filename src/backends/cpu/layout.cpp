// Ops that move values on the CPU, in any dtype (bytes, never arithmetic): Transpose, Pad, and Concat / Slice / Reverse
// along any axis. Along an axis, a tensor is (outer, axis * inner) rows: concatenating or slicing there is copying runs
// of bytes per outer row.
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/strided_loop.h"
#include "backends/strided.h"
#include "graph/kernel.h"
#include "trainkit/core/convert.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

template <typename T>
struct Transpose {
  static void run(const KernelArgs& a) {
    copy_rows(backends::transpose_layout(a.in_shape(0), a.node.attrs.perm), static_cast<const T*>(a.in[0]),
              static_cast<T*>(a.out));
  }
};

template <typename T>
struct Pad {
  static void run(const KernelArgs& a) {
    const Shape& xs = a.in_shape(0);
    const Shape& ys = a.node.shape;
    const T* x = static_cast<const T*>(a.in[0]);
    T* y = static_cast<T*>(a.out);
    T fill;
    convert_elements(&a.node.attrs.value, DType::f32, &fill, a.out_dtype, 1);
    const int64_t total = ys.numel();
    parallel_for(total, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = fill;
    });
    // x's elements in x's order (operand 0: y's strides); the block starts at the padding before each axis.
    math::Strided s;
    s.rank = xs.rank();
    int64_t stride = 1, base = 0;
    for (int d = ys.rank() - 1; d >= 0; --d) {
      s.dims[d] = xs[d];
      s.stride[0][d] = stride;
      base += a.node.attrs.pad_before[d] * stride;
      stride *= ys[d];
    }
    if (xs.numel() == 0) return;
    if (s.rank == 0) {
      y[0] = x[0];
      return;
    }
    backends::merge_axes(s, 1);
    for_rows(s, 1, [&](int64_t o, const int64_t* off, const int64_t*, int64_t n) {
      std::memcpy(y + base + off[0], x + o, sizeof(T) * static_cast<size_t>(n));
    });
  }
};

// The node's axis of s, s's outer rows before it, and the bytes per outer row of one unit along it.
struct AroundAxis {
  int axis;
  int64_t outer;
  size_t unit;
};
AroundAxis around_axis(const KernelArgs& a, const Shape& s) {
  const int axis = a.node.attrs.axis < 0 ? a.node.attrs.axis + s.rank() : a.node.attrs.axis;
  AroundAxis r{axis, 1, dtype_size(a.out_dtype)};
  for (int d = 0; d < axis; ++d) r.outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) r.unit *= static_cast<size_t>(s[d]);
  return r;
}

// y(outer, sum of widths) = [x_0 | x_1 | ...] per outer row
void concat(const KernelArgs& a) {
  const auto [axis, outer, unit] = around_axis(a, a.node.shape);
  const size_t row = unit * static_cast<size_t>(a.node.shape[axis]);
  auto* y = static_cast<char*>(a.out);
  size_t col = 0;
  for (size_t j = 0; j < a.node.inputs.size(); ++j) {
    const size_t w = unit * static_cast<size_t>(a.in_shape(static_cast<int>(j))[axis]);
    const auto* x = static_cast<const char*>(a.in[j]);
    for (int64_t r = 0; r < outer; ++r)
      std::memcpy(y + static_cast<size_t>(r) * row + col, x + static_cast<size_t>(r) * w, w);
    col += w;
  }
}

// y(outer, size) = x(outer, width)[:, begin:begin + size] along the axis
void slice(const KernelArgs& a) {
  const Shape& xs = a.in_shape(0);
  const auto [axis, outer, unit] = around_axis(a, xs);
  const size_t width = unit * static_cast<size_t>(xs[axis]), size = unit * static_cast<size_t>(a.node.attrs.size);
  const size_t begin = unit * static_cast<size_t>(a.node.attrs.begin);
  const auto* x = static_cast<const char*>(a.in[0]);
  auto* y = static_cast<char*>(a.out);
  for (int64_t r = 0; r < outer; ++r)
    std::memcpy(y + static_cast<size_t>(r) * size, x + static_cast<size_t>(r) * width + begin, size);
}

// y(outer, L, unit) = x(outer, L - 1 - j, unit): the order along the axis reversed
void reverse(const KernelArgs& a) {
  const Shape& xs = a.in_shape(0);
  const auto [axis, outer, unit] = around_axis(a, xs);
  const int64_t len = xs[axis];
  const size_t row = unit * static_cast<size_t>(len);
  const auto* x = static_cast<const char*>(a.in[0]);
  auto* y = static_cast<char*>(a.out);
  parallel_for(outer * len, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t r = i / len, j = i % len;
      std::memcpy(y + static_cast<size_t>(r) * row + static_cast<size_t>(j) * unit,
                  x + static_cast<size_t>(r) * row + static_cast<size_t>(len - 1 - j) * unit, unit);
    }
  });
}

}  // namespace

void register_layout_kernels() {
  for (int t = 0; t < kDTypeCount; ++t) {  // bytes: every dtype, exactly
    const auto dt = static_cast<DType>(t);
    graph::register_kernel(DeviceKind::cpu, Op::Transpose, dt, by_size<Transpose>);
    graph::register_kernel(DeviceKind::cpu, Op::Pad, dt, by_size<Pad>);
    graph::register_kernel(DeviceKind::cpu, Op::Concat, dt, concat);
    graph::register_kernel(DeviceKind::cpu, Op::Slice, dt, slice);
    graph::register_kernel(DeviceKind::cpu, Op::Reverse, dt, reverse);
  }
}

}  // namespace tk::cpu
