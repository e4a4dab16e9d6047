// The general Reduce op's accumulations (graph/tensor_fns.h: ReduceFn), shared by the CPU (backends/cpu/reduce.cpp)
// and CUDA (backends/cuda/tensor_ops.cu) kernels: sums and products in double, in index order; max and min
// propagate NaN (as NumPy and TensorFlow); logsumexp is max + log(sum(exp(x - max))), its max found first. Integer
// inputs: reduce_integers.
//
//   float y = tk::math::reduce_strided<tk::graph::ReduceFn::mean>(x, n, stride);
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/math/host_device.h"
#include "backends/math/strided.h"
#include "graph/tensor_fns.h"

namespace tk::math {

// +-inf (x - x is NaN only for infinities and NaN); the same test on both compilers.
TK_HD bool infinite(float v) { return v == v && v - v != v - v; }
TK_HD float nan_max(float m, float v) { return m != m ? m : v != v ? v : (v > m ? v : m); }
TK_HD float nan_min(float m, float v) { return m != m ? m : v != v ? v : (v < m ? v : m); }

// The reduction of x[0], x[stride], ..., x[(n - 1) * stride].
template <graph::ReduceFn F>
TK_HD float reduce_strided(const float* x, int64_t n, int64_t stride) {
  using graph::ReduceFn;
  if constexpr (F == ReduceFn::max || F == ReduceFn::min || F == ReduceFn::logsumexp) {
    float m = x[0];
    for (int64_t r = 1; r < n; ++r) m = F == ReduceFn::min ? nan_min(m, x[r * stride]) : nan_max(m, x[r * stride]);
    if constexpr (F != ReduceFn::logsumexp) {
      return m;
    } else {
      if (m != m || infinite(m)) return m;  // NaN, or +-inf (exp(x - m) would be NaN)
      double s = 0.0;
      for (int64_t r = 0; r < n; ++r) s += static_cast<double>(expf(x[r * stride] - m));
      return m + static_cast<float>(log(s));
    }
  } else if constexpr (F == ReduceFn::prod) {
    double p = 1.0;
    for (int64_t r = 0; r < n; ++r) p *= static_cast<double>(x[r * stride]);
    return static_cast<float>(p);
  } else {
    double s = 0.0;
    for (int64_t r = 0; r < n; ++r) s += static_cast<double>(x[r * stride]);
    if constexpr (F == ReduceFn::mean) return n ? static_cast<float>(s / static_cast<double>(n)) : NAN;
    return static_cast<float>(s);
  }
}

// The reduction of the elements at x + strided_offset(reduced, 0, r), r = 0 .. count - 1 (reduced axes that do not
// merge into one equally spaced run), in the same order and precision as reduce_strided.
template <graph::ReduceFn F>
TK_HD float reduce_offsets(const float* x, const Strided& reduced, int64_t count) {
  using graph::ReduceFn;
  if constexpr (F == ReduceFn::sum || F == ReduceFn::mean || F == ReduceFn::prod) {
    double acc = F == ReduceFn::prod ? 1.0 : 0.0;
    for (int64_t r = 0; r < count; ++r) {
      const double v = x[strided_offset(reduced, 0, r)];
      acc = F == ReduceFn::prod ? acc * v : acc + v;
    }
    return static_cast<float>(F == ReduceFn::mean ? acc / static_cast<double>(count) : acc);
  } else {
    float m = x[0];
    for (int64_t r = 1; r < count; ++r) {
      const float v = x[strided_offset(reduced, 0, r)];
      m = F == ReduceFn::min ? nan_min(m, v) : nan_max(m, v);
    }
    if constexpr (F == ReduceFn::logsumexp) {
      if (m == m && !infinite(m)) {
        double s = 0.0;
        for (int64_t r = 0; r < count; ++r) s += static_cast<double>(expf(x[strided_offset(reduced, 0, r)] - m));
        m += static_cast<float>(log(s));
      }
    }
    return m;
  }
}

// Integers (int32, int64): sum and prod wrap around on overflow as the elementwise ops (backends/math/binary.h),
// max and min are exact; of the elements at x + strided_offset(reduced, 0, r), r = 0 .. count - 1, in index order.
// An empty sum is 0 and an empty product 1 (max and min of nothing are shape errors).
template <graph::ReduceFn F, typename T>
TK_HD T reduce_integers(const T* x, const Strided& reduced, int64_t count) {
  using graph::ReduceFn;
  using U = std::make_unsigned_t<T>;
  if constexpr (F == ReduceFn::max || F == ReduceFn::min) {
    T m = x[0];
    for (int64_t r = 1; r < count; ++r) {
      const T v = x[strided_offset(reduced, 0, r)];
      m = F == ReduceFn::max ? (v > m ? v : m) : (v < m ? v : m);
    }
    return m;
  } else {
    U acc = F == ReduceFn::prod ? U(1) : U(0);
    for (int64_t r = 0; r < count; ++r) {
      const U v = static_cast<U>(x[strided_offset(reduced, 0, r)]);
      acc = F == ReduceFn::prod ? static_cast<U>(acc * v) : static_cast<U>(acc + v);
    }
    return static_cast<T>(acc);
  }
}

template <typename T>
TK_HD bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

// The index of the first max (max_not_min) or min of x[0], x[stride], ...; a NaN counts as the extreme (NumPy).
template <typename T>
TK_HD int32_t arg_extreme(const T* x, int64_t n, int64_t stride, bool max_not_min) {
  int32_t best = 0;
  T v = x[0];
  if (is_nan(v)) return 0;
  for (int64_t r = 1; r < n; ++r) {
    const T u = x[r * stride];
    if (is_nan(u)) return static_cast<int32_t>(r);
    if (max_not_min ? u > v : u < v) v = u, best = static_cast<int32_t>(r);
  }
  return best;
}

}  // namespace tk::math
