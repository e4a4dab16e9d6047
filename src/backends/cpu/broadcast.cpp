// Broadcasting ops on the CPU: Binary, Compare (float32, int32, int64), Where and BroadcastTo (every dtype) over
// math::Strided layouts (backends/strided.h), the per-element math of backends/math/binary.h. The inner loop is
// specialized for the common strides (both operands contiguous, one a broadcast scalar along the row) so that it
// vectorizes.
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/strided_loop.h"
#include "backends/device_errors.h"
#include "backends/math/binary.h"
#include "backends/strided.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
namespace {
using graph::BinaryFn;
using graph::KernelArgs;
using graph::Op;

template <typename T, typename F, typename Out>
void rows2(const KernelArgs& a, const T* x, const T* y, Out* out, F f) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  for_rows(s, 2, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
    const T* xr = x + off[0];
    const T* yr = y + off[1];
    Out* zr = out + o;
    if (st[0] == 1 && st[1] == 1) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j], yr[j]);
    } else if (st[0] == 1 && st[1] == 0) {
      const T v = yr[0];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j], v);
    } else if (st[0] == 0 && st[1] == 1) {
      const T v = xr[0];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(v, yr[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j * st[0]], yr[j * st[1]]);
    }
  });
}

template <BinaryFn F, typename T>
void arithmetic(const KernelArgs& a) {
  rows2(a, a.input<T>(0), a.input<T>(1), a.output<T>(), [](T u, T v) { return math::arithmetic<F>(u, v); });
}

template <BinaryFn F, typename T>
void comparison(const KernelArgs& a) {
  rows2(a, a.input<T>(0), a.input<T>(1), a.output<bool>(), [](T u, T v) { return math::comparison<F>(u, v); });
}

// Integers: a divisor of 0 or a negative exponent anywhere in b is an InvalidArgument before anything is computed
// (TensorFlow's CPU kernels check too), worded as the CUDA kernels' record (backends/device_errors.h).
template <typename T>
void check_integer_operand(const KernelArgs& a) {
  const BinaryFn f = a.node.attrs.binary;
  if (f != BinaryFn::floor_divide && f != BinaryFn::mod && f != BinaryFn::power) return;
  const int64_t count = a.in_shape(1).numel();
  if (a.node.shape.numel() == 0) return;
  const T* b = a.input<T>(1);
  if (const int64_t j = math::first_bad_operand(f, b, count, 0, 1); j < count)
    throw InvalidArgument(backends::integer_operand_message(a.node, static_cast<int64_t>(b[j]), j, a.in_shape(1)));
}

template <typename T>
void binary(const KernelArgs& a) {
  if constexpr (std::is_integral_v<T>) check_integer_operand<T>(a);
  switch (a.node.attrs.binary) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return arithmetic<BinaryFn::name, T>(a);
    TK_ARITHMETIC_FNS(TK_CASE)
#undef TK_CASE
    default:
      break;
  }
  unknown_function(a.node, "attrs.binary (an arithmetic function)");
}

template <typename T>
void compare(const KernelArgs& a) {
  switch (a.node.attrs.binary) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return comparison<BinaryFn::name, T>(a);
    TK_COMPARISON_FNS(TK_CASE)
#undef TK_CASE
    default:
      break;
  }
  unknown_function(a.node, "attrs.binary (a comparison)");
}

// y = cond ? x : z over elements of `bytes` each (any dtype: the branches are copied, not computed).
template <typename T>
struct Where {
  static void run(const KernelArgs& a) {
    const bool* c = static_cast<const bool*>(a.in[0]);
    const T* x = static_cast<const T*>(a.in[1]);
    const T* z = static_cast<const T*>(a.in[2]);
    T* y = static_cast<T*>(a.out);
    const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1), &a.in_shape(2)});
    for_rows(s, 3, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
      for (int64_t j = 0; j < n; ++j) y[o + j] = c[off[0] + j * st[0]] ? x[off[1] + j * st[1]] : z[off[2] + j * st[2]];
    });
  }
};

template <typename T>
struct BroadcastTo {
  static void run(const KernelArgs& a) {
    copy_rows(backends::broadcast_layout(a.node.shape, {&a.in_shape(0)}), static_cast<const T*>(a.in[0]),
              static_cast<T*>(a.out));
  }
};

}  // namespace

void register_broadcast_kernels() {
  using graph::KernelSignature;
  using graph::register_kernel;
  register_kernel(DeviceKind::cpu, Op::Binary, DType::f32, binary<float>);
  register_kernel(DeviceKind::cpu, Op::Compare, DType::f32, compare<float>);
  register_kernel(DeviceKind::cpu, Op::Binary, DType::i32, binary<int32_t>);
  register_kernel(DeviceKind::cpu, Op::Compare, DType::i32, compare<int32_t>);
  register_kernel(DeviceKind::cpu, Op::Binary, DType::i64, binary<int64_t>);
  register_kernel(DeviceKind::cpu, Op::Compare, DType::i64, compare<int64_t>);
  for (int t = 0; t < kDTypeCount; ++t) {  // moves values: every dtype, exactly
    const auto dt = static_cast<DType>(t);
    register_kernel(DeviceKind::cpu, Op::Where, KernelSignature({DType::boolean, dt, dt}, dt), by_size<Where>);
    register_kernel(DeviceKind::cpu, Op::BroadcastTo, dt, by_size<BroadcastTo>);
  }
}

}  // namespace tk::cpu
