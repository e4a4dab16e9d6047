#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/math/random.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

void fill(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  float* y = a.output<float>();
  for (int64_t i = 0; i < n; ++i) y[i] = a.node.attrs.value;
}

void add(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const size_t k = a.node.inputs.size();
  float* y = a.output<float>();
  const float* x0 = a.input<float>(0);
  const float* x1 = k > 1 ? a.input<float>(1) : x0;
  if (k == 1) {
    std::memcpy(y, x0, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = x0[i] + x1[i];
    for (size_t j = 2; j < k; ++j) {
      const float* xj = a.input<float>(static_cast<int>(j));
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] += xj[i];
    }
  });
}

void mul(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float* x0 = a.input<float>(0);
  const float* x1 = a.input<float>(1);
  float* y = a.output<float>();
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = x0[i] * x1[i];
  });
}

void scale(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  const float k = a.node.attrs.scale, b = a.node.attrs.offset;
  parallel_for(n, [&](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) y[i] = x[i] * k + b;
  });
}

void reshape(const KernelArgs& a) {
  std::memcpy(a.out, a.in[0], static_cast<size_t>(a.node.shape.numel()) * dtype_size(a.node.dtype));
}

// mask = 0 with probability rate, else 1/(1-rate); randomness from (seed, step, global element index) only,
// so it does not depend on the thread count.
// The mask's math is backends/math/random.h, shared with the CUDA kernel.
void dropout_mask(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float rate = a.node.attrs.rate, keep = 1.0f / (1.0f - rate);
  const uint64_t stream = math::dropout_stream(a.node.attrs.seed, a.scalars->step);
  float* y = a.output<float>();
  const Shape& s = a.node.shape;
  const bool spatial = a.node.attrs.spatial && s.rank() == 4;
  const int64_t c = s.rank() ? s[-1] : 1, rows = s.rank() && s[0] > 0 ? s[0] : 1;
  const math::DropoutLayout layout{spatial, spatial ? s[1] * s[2] * c : 1, c, n / rows, a.scalars->sample_offset};
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = math::dropout_value(stream, math::dropout_key(i, layout), rate, keep);
  });
}

// RandomUniform / RandomNormal: DropoutMask's stream and non-spatial layout (rows keyed by the global sample).
template <bool Normal>
void random_values(const KernelArgs& a) {
  const Shape& s = a.node.shape;
  const int64_t n = s.numel(), rows = s.rank() && s[0] > 0 ? s[0] : 1;
  const uint64_t stream = math::dropout_stream(a.node.attrs.seed, a.scalars->step);
  const math::DropoutLayout layout{false, 1, 1, n / rows, a.scalars->sample_offset};
  float* y = a.output<float>();
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t key = math::dropout_key(i, layout);
      y[i] = Normal ? math::standard_normal(stream, key) : math::uniform01(stream, key);
    }
  });
}

}  // namespace

void register_elementwise_kernels() {
  using graph::register_kernel;
  register_kernel(DeviceKind::cpu, Op::Fill, DType::f32, fill);
  register_kernel(DeviceKind::cpu, Op::Add, DType::f32, add);
  register_kernel(DeviceKind::cpu, Op::Mul, DType::f32, mul);
  register_kernel(DeviceKind::cpu, Op::Scale, DType::f32, scale);
  for (int t = 0; t < kDTypeCount; ++t)  // a byte copy: every dtype
    register_kernel(DeviceKind::cpu, Op::Reshape, static_cast<DType>(t), reshape);
  register_kernel(DeviceKind::cpu, Op::DropoutMask, DType::f32, dropout_mask);
  register_kernel(DeviceKind::cpu, Op::RandomUniform, DType::f32, random_values<false>);
  register_kernel(DeviceKind::cpu, Op::RandomNormal, DType::f32, random_values<true>);
}

}  // namespace tk::cpu
