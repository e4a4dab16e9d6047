// The Constrain op's layout (backends/math/constraints.h), built on the host by every backend's kernel from the
// variable's shape and the node's attrs: which axes a norm runs over, and the rule.
//
//   math::ConstraintLayout l = backends::constraint_layout(a.in_shape(0), a.node.attrs);
#pragma once
#include "backends/math/constraints.h"
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

}  // namespace tk::backends
