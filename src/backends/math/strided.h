// Element offsets of broadcast and permuted operands, for the general tensor ops' kernels on every backend: the
// output's dimensions and, per operand, its element stride along each output axis (0 where it is broadcast).
// Built on the host (backends/strided.h); read by the CPU loops and the CUDA kernels alike.
//
//   tk::math::Strided s = tk::backends::broadcast_layout(out_shape, {&a_shape, &b_shape});
//   int64_t ai = tk::math::strided_offset(s, 0, i);   // where output element i reads operand 0
#pragma once
#include <cstdint>

#include "backends/math/host_device.h"
#include "graph/tensor_fns.h"

namespace tk::math {

struct Strided {
  static constexpr int kOperands = 3;
  int rank = 0;
  int64_t dims[graph::kMaxRank] = {};               // the output's, after merging axes that stay contiguous
  int64_t stride[kOperands][graph::kMaxRank] = {};  // per operand, in elements; 0 along broadcast axes
};

// The offset in operand k of output element i (row-major).
TK_HD int64_t strided_offset(const Strided& s, int k, int64_t i) {
  int64_t off = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t q = i % s.dims[d];
    i /= s.dims[d];
    off += q * s.stride[k][d];
  }
  return off;
}

}  // namespace tk::math
