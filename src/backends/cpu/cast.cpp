// Cast on the CPU: every pair of dtypes, through the conversion Tensor::to and batch staging use
// (core/convert.h), so all three round alike.
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "trainkit/core/convert.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

void convert_parallel(const void* src, DType from, void* dst, DType to, int64_t n, const graph::ExecContext&) {
  const size_t sf = dtype_size(from), st = dtype_size(to);
  parallel_for(n, [&](int64_t b, int64_t e) {
    convert_elements(static_cast<const char*>(src) + static_cast<size_t>(b) * sf, from,
                     static_cast<char*>(dst) + static_cast<size_t>(b) * st, to, static_cast<size_t>(e - b));
  });
}

namespace {
void cast(const KernelArgs& a) {
  convert_parallel(a.in[0], a.in_dtypes[0], a.out, a.out_dtype, a.node.shape.numel(), a.ctx);
}
}  // namespace

void register_cast_kernels() {
  for (int f = 0; f < kDTypeCount; ++f)
    for (int t = 0; t < kDTypeCount; ++t)
      graph::register_kernel(DeviceKind::cpu, Op::Cast,
                             graph::KernelSignature({static_cast<DType>(f)}, static_cast<DType>(t)), cast);
}

}  // namespace tk::cpu
