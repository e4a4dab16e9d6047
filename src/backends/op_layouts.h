// The layouts of the ops whose per-element math both backends share (backends/math/), built on the host by every
// backend's kernel from shapes and the node's attrs: Constrain (which axes a norm runs over, and the rule), Resize and
// AffineTransform.
//
//   math::ConstraintLayout l = backends::constraint_layout(a.in_shape(0), a.node.attrs);
//   math::ResizeLayout r = backends::resize_layout(x_shape, y_shape, a.node.attrs.bilinear);
#pragma once
#include "backends/math/affine.h"
#include "backends/math/constraints.h"
#include "backends/math/resize.h"
#include "graph/op.h"
#include "trainkit/core/shape.h"

namespace tk::backends {

inline math::ConstraintLayout constraint_layout(const Shape& var, const graph::Attrs& at) {
  math::ConstraintLayout l;
  l.kind = static_cast<math::ConstraintKind>(at.constraint);
  l.min_value = at.norm_min;
  l.max_value = at.norm_max;
  l.rate = at.norm_rate;
  const uint32_t axes = l.kind == math::ConstraintKind::non_neg ? 0u : at.axes;  // NonNeg: every element alone
  int64_t stride = 1;
  int64_t strides[graph::kMaxRank] = {};
  for (int d = var.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= var[d];
  }
  for (int d = 0; d < var.rank(); ++d) {
    if (axes & (1u << d)) {
      l.inner_dims[l.inner_rank] = var[d];
      l.inner_stride[l.inner_rank++] = strides[d];
      l.per_slice *= var[d];
    } else {
      l.outer_dims[l.outer_rank] = var[d];
      l.outer_stride[l.outer_rank++] = strides[d];
      l.slices *= var[d];
    }
  }
  return l;
}

// Resize between x (N, H, W, C) and y (N, H', W', C) (ResizeGrad: the same two shapes).
inline math::ResizeLayout resize_layout(const Shape& x, const Shape& y, bool bilinear) {
  return {x[0], x[1], x[2], y[1], y[2], x[3], bilinear};
}

// AffineTransform (and its gradient) on images x (N, H, W, C).
inline math::AffineLayout affine_layout(const Shape& x, const graph::Attrs& at) {
  return {x[0], x[1], x[2], x[3], at.bilinear, static_cast<math::FillMode>(at.fill_mode), at.value};
}

}  // namespace tk::backends
