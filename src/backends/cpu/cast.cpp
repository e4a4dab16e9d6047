// Cast on the CPU: every pair of dtypes, through the conversion Tensor::to and batch staging use
// (core/convert.h), so all three round alike.
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "trainkit/core/convert.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

void cast(const KernelArgs& a) {
  const DType from = a.in_dtypes[0], to = a.out_dtype;
  const auto* src = static_cast<const char*>(a.in[0]);
  auto* dst = static_cast<char*>(a.out);
  const size_t sf = dtype_size(from), st = dtype_size(to);
  parallel_for(a.node.shape.numel(), [&](int64_t b, int64_t e) {
    convert_elements(src + static_cast<size_t>(b) * sf, from, dst + static_cast<size_t>(b) * st, to,
                     static_cast<size_t>(e - b));
  });
}

}  // namespace

void register_cast_kernels() {
  for (int f = 0; f < kDTypeCount; ++f)
    for (int t = 0; t < kDTypeCount; ++t)
      graph::register_kernel(DeviceKind::cpu, Op::Cast,
                             graph::KernelSignature({static_cast<DType>(f)}, static_cast<DType>(t)), cast);
}

}  // namespace tk::cpu
