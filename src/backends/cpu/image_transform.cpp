// Keras' image affine transform on the CPU (backends/math/affine.h): AffineTransform, one output pixel's channels per
// step, pixels in parallel; AffineTransformGrad, each (image, channel) scattered in output order by one thread (no
// two threads write the same element, and the sums run in the CUDA kernel's order).
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/op_layouts.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

void affine(const KernelArgs& a) {
  const math::AffineLayout l = backends::affine_layout(a.in_shape(0), a.node.attrs);
  const float* x = a.input<float>(0);
  const float* t = a.input<float>(1);  // (N, 8)
  float* y = a.output<float>();
  parallel_for(l.n * l.h * l.w, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t ox = p % l.w, oy = p / l.w % l.h, n = p / (l.w * l.h);
      for (int64_t c = 0; c < l.c; ++c) y[p * l.c + c] = math::affine_at(x, t + 8 * n, l, n, oy, ox, c);
    }
  });
}

void affine_grad(const KernelArgs& a) {
  const math::AffineLayout l = backends::affine_layout(a.in_shape(0), a.node.attrs);
  const float* dy = a.input<float>(0);
  const float* t = a.input<float>(1);
  float* dx = a.output<float>();
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(a.node.shape.numel()));
  parallel_for(
      l.n * l.c,
      [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) math::affine_scatter_grad(dy, t + 8 * (k / l.c), l, k / l.c, k % l.c, dx);
      },
      1);
}

}  // namespace

void register_image_transform_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::AffineTransform, DType::f32, affine);
  graph::register_kernel(DeviceKind::cpu, Op::AffineTransformGrad, DType::f32, affine_grad);
}

}  // namespace tk::cpu
