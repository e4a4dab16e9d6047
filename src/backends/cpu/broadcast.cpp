// Broadcasting ops on the CPU: Binary, Compare, Where and BroadcastTo over math::Strided layouts
// (backends/strided.h), the per-element math of backends/math/binary.h. The inner loop is specialized for the
// common strides (both operands contiguous, one a broadcast scalar along the row) so that it vectorizes.
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/strided_loop.h"
#include "backends/math/binary.h"
#include "backends/strided.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::BinaryFn;
using graph::KernelArgs;
using graph::Op;

template <typename F, typename Out>
void rows2(const KernelArgs& a, const float* x, const float* y, Out* out, F f) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  for_rows(s, 2, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
    const float* xr = x + off[0];
    const float* yr = y + off[1];
    Out* zr = out + o;
    if (st[0] == 1 && st[1] == 1) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j], yr[j]);
    } else if (st[0] == 1 && st[1] == 0) {
      const float v = yr[0];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j], v);
    } else if (st[0] == 0 && st[1] == 1) {
      const float v = xr[0];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) zr[j] = f(v, yr[j]);
    } else {
      for (int64_t j = 0; j < n; ++j) zr[j] = f(xr[j * st[0]], yr[j * st[1]]);
    }
  });
}

template <BinaryFn F>
void arithmetic(const KernelArgs& a) {
  rows2(a, a.input<float>(0), a.input<float>(1), a.output<float>(),
        [](float u, float v) { return math::arithmetic<F>(u, v); });
}

template <BinaryFn F>
void comparison(const KernelArgs& a) {
  rows2(a, a.input<float>(0), a.input<float>(1), a.output<bool>(),
        [](float u, float v) { return math::comparison<F>(u, v); });
}

void binary(const KernelArgs& a) {
  switch (a.node.attrs.binary) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return arithmetic<BinaryFn::name>(a);
    TK_ARITHMETIC_FNS(TK_CASE)
#undef TK_CASE
    default:
      break;
  }
  unknown_function(a.node, "attrs.binary (an arithmetic function)");
}

void compare(const KernelArgs& a) {
  switch (a.node.attrs.binary) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return comparison<BinaryFn::name>(a);
    TK_COMPARISON_FNS(TK_CASE)
#undef TK_CASE
    default:
      break;
  }
  unknown_function(a.node, "attrs.binary (a comparison)");
}

// y = cond ? x : z over elements of `bytes` each (any dtype: the branches are copied, not computed).
template <typename T>
void where_typed(const KernelArgs& a) {
  const bool* c = static_cast<const bool*>(a.in[0]);
  const T* x = static_cast<const T*>(a.in[1]);
  const T* z = static_cast<const T*>(a.in[2]);
  T* y = static_cast<T*>(a.out);
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1), &a.in_shape(2)});
  for_rows(s, 3, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
    for (int64_t j = 0; j < n; ++j) y[o + j] = c[off[0] + j * st[0]] ? x[off[1] + j * st[1]] : z[off[2] + j * st[2]];
  });
}

void where(const KernelArgs& a) {
  switch (dtype_size(a.out_dtype)) {
    case 1:
      return where_typed<uint8_t>(a);
    case 2:
      return where_typed<uint16_t>(a);
    case 4:
      return where_typed<uint32_t>(a);
    default:
      return where_typed<uint64_t>(a);
  }
}

template <typename T>
void broadcast_typed(const KernelArgs& a) {
  const T* x = static_cast<const T*>(a.in[0]);
  T* y = static_cast<T*>(a.out);
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0)});
  for_rows(s, 1, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
    if (st[0] == 1) {
      std::memcpy(y + o, x + off[0], sizeof(T) * static_cast<size_t>(n));
    } else {
      for (int64_t j = 0; j < n; ++j) y[o + j] = x[off[0] + j * st[0]];
    }
  });
}

void broadcast_to(const KernelArgs& a) {
  switch (dtype_size(a.out_dtype)) {
    case 1:
      return broadcast_typed<uint8_t>(a);
    case 2:
      return broadcast_typed<uint16_t>(a);
    case 4:
      return broadcast_typed<uint32_t>(a);
    default:
      return broadcast_typed<uint64_t>(a);
  }
}

}  // namespace

void register_broadcast_kernels() {
  using graph::KernelSignature;
  using graph::register_kernel;
  register_kernel(DeviceKind::cpu, Op::Binary, DType::f32, binary);
  register_kernel(DeviceKind::cpu, Op::Compare, DType::f32, compare);
  for (int t = 0; t < kDTypeCount; ++t) {  // moves values: every dtype, exactly
    const auto dt = static_cast<DType>(t);
    register_kernel(DeviceKind::cpu, Op::Where, KernelSignature({DType::boolean, dt, dt}, dt), where);
    register_kernel(DeviceKind::cpu, Op::BroadcastTo, dt, broadcast_to);
  }
}

}  // namespace tk::cpu
