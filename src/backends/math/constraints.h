// Keras' weight constraints (keras.constraints), one slice of a variable at a time, for the Constrain op's kernels on
// every backend. A slice is the set of elements that share one norm: the variable's elements along the norm axes
// (Keras' `axis`) for one index of the other axes; NonNeg has no axes, so each element is its own slice.
//
//   tk::math::ConstraintLayout l = tk::backends::constraint_layout(var_shape, axes_mask, attrs);  // on the host
//   for (int64_t k = 0; k < l.slices; ++k) tk::math::constrain_slice(w, l, k);                  // CPU loop / CUDA
//   thread
//
// The formulas are Keras 3's, in its order of operations, with backend.epsilon() = 1e-7:
//   NonNeg      w * (w >= 0)                           (a NaN stays NaN, -inf becomes NaN: 0 * -inf, as Keras)
//   MaxNorm     w * (clip(n, 0, max_value) / (eps + n)),  n = sqrt(sum(w^2 over axis))
//   UnitNorm    w / (eps + n)
//   MinMaxNorm  w * ((rate * clip(n, min_value, max_value) + (1 - rate) * n) / (eps + n))
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"
#include "graph/tensor_fns.h"

namespace tk::math {

using graph::ConstraintKind;                        // non_neg, max_norm, unit_norm, min_max_norm
inline constexpr float kConstraintEpsilon = 1e-7f;  // Keras' backend.epsilon()

struct ConstraintLayout {
  ConstraintKind kind = ConstraintKind::non_neg;
  float min_value = 0.0f, max_value = 0.0f, rate = 1.0f;
  int64_t slices = 1, per_slice = 1;  // slices * per_slice = the variable's elements
  // The axes outside the norm (slice index k) and along it (element r of a slice), row-major, with element strides.
  int outer_rank = 0, inner_rank = 0;
  int64_t outer_dims[graph::kMaxRank] = {}, outer_stride[graph::kMaxRank] = {};
  int64_t inner_dims[graph::kMaxRank] = {}, inner_stride[graph::kMaxRank] = {};
};

TK_HD int64_t constraint_offset(const int64_t* dims, const int64_t* stride, int rank, int64_t i) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    off += (i % dims[d]) * stride[d];
    i /= dims[d];
  }
  return off;
}

TK_HD float clip_norm(float n, float lo, float hi) { return n < lo ? lo : n > hi ? hi : n; }

// Applies the constraint to slice k of w (float32, in place).
TK_HD void constrain_slice(float* w, const ConstraintLayout& l, int64_t k) {
  float* base = w + constraint_offset(l.outer_dims, l.outer_stride, l.outer_rank, k);
  auto at = [&](int64_t r) -> float& { return base[constraint_offset(l.inner_dims, l.inner_stride, l.inner_rank, r)]; };
  if (l.kind == ConstraintKind::non_neg) {
    for (int64_t r = 0; r < l.per_slice; ++r) at(r) = at(r) * (at(r) >= 0.0f ? 1.0f : 0.0f);
    return;
  }
  float sum = 0.0f;
  for (int64_t r = 0; r < l.per_slice; ++r) sum += at(r) * at(r);
  const float n = sqrtf(sum);
  if (l.kind == ConstraintKind::unit_norm) {
    const float d = kConstraintEpsilon + n;
    for (int64_t r = 0; r < l.per_slice; ++r) at(r) = at(r) / d;
    return;
  }
  const float desired = l.kind == ConstraintKind::max_norm
                            ? clip_norm(n, 0.0f, l.max_value)
                            : l.rate * clip_norm(n, l.min_value, l.max_value) + (1.0f - l.rate) * n;
  const float factor = desired / (kConstraintEpsilon + n);
  for (int64_t r = 0; r < l.per_slice; ++r) at(r) = at(r) * factor;
}

}  // namespace tk::math
