// The general Binary and Compare ops' functions (graph/tensor_fns.h: BinaryFn), per element: one definition the CPU
// (backends/cpu/binary.cpp) and CUDA (backends/cuda/tensor_ops.cu) kernels both run.
//
//   float y = tk::math::arithmetic<tk::graph::BinaryFn::maximum>(a, b);   // NaN if either is NaN
//   bool c = tk::math::comparison<tk::graph::BinaryFn::less>(a, b);
#pragma once
#include <cmath>

#include "backends/math/host_device.h"
#include "graph/tensor_fns.h"

namespace tk::math {

template <graph::BinaryFn F>
TK_HD float arithmetic(float a, float b) {
  using graph::BinaryFn;
  if constexpr (F == BinaryFn::add) return a + b;
  if constexpr (F == BinaryFn::subtract) return a - b;
  if constexpr (F == BinaryFn::multiply) return a * b;
  if constexpr (F == BinaryFn::divide) return a / b;
  if constexpr (F == BinaryFn::maximum) return a != a ? a : b != b ? b : a >= b ? a : b;
  if constexpr (F == BinaryFn::minimum) return a != a ? a : b != b ? b : a <= b ? a : b;
  if constexpr (F == BinaryFn::power) return powf(a, b);
  if constexpr (F == BinaryFn::squared_difference) return (a - b) * (a - b);
  return a;
}

template <graph::BinaryFn F>
TK_HD bool comparison(float a, float b) {
  using graph::BinaryFn;
  if constexpr (F == BinaryFn::equal) return a == b;
  if constexpr (F == BinaryFn::not_equal) return a != b;
  if constexpr (F == BinaryFn::less) return a < b;
  if constexpr (F == BinaryFn::less_equal) return a <= b;
  if constexpr (F == BinaryFn::greater) return a > b;
  if constexpr (F == BinaryFn::greater_equal) return a >= b;
  return false;
}

}  // namespace tk::math
