// Losses with Keras 3 semantics (reduction "sum_over_batch_size"), their gradients, and accuracy metrics.
// Probabilities are clipped to [eps, 1 - eps] with Keras' epsilon 1e-7 when from_logits is false.
#include "backends/math/losses.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cpu/kernels.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

struct Dims {
  int64_t rows, classes;
};
Dims dims(const KernelArgs& a) {
  const Shape& p = a.in_shape(0);
  const int64_t c = p.rank() > 1 ? p[-1] : 1;
  return {p.numel() / (c ? c : 1), c};
}

// Labels of a sparse loss/metric, checked before use: a bad label names its row and the valid range.
const int32_t* checked_labels(const KernelArgs& a, Dims d) {
  const auto* t = a.input<int32_t>(1);
  for (int64_t r = 0; r < d.rows; ++r)
    if (t[r] < 0 || t[r] >= d.classes)
      throw InvalidArgument(std::string(graph::op_name(a.node.op)) + " '" + a.node.name + "': label " +
                            std::to_string(t[r]) + " at batch row " + std::to_string(r) + " is outside [0, " +
                            std::to_string(d.classes) + ") (the model's last layer has " + std::to_string(d.classes) +
                            " units; check the labels or the layer size)");
  return t;
}

float scale_of(const KernelArgs& a, int dy_input, int64_t denom) {
  return (dy_input >= 0 ? *a.input<float>(dy_input) : 1.0f) / static_cast<float>(denom ? denom : 1);
}

// The per-element and per-row math is backends/math/losses.h, shared with the CUDA kernels; means sum in double, in
// order.
// ---------------------------------------------------------------- mean squared error
void mse(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += math::mse_term(p[i], t[i]);
  *a.output<float>() = static_cast<float>(s / static_cast<double>(n ? n : 1));
}
void mse_grad(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  const float k = 2.0f * scale_of(a, 2, n);
  float* dp = a.output<float>();
  for (int64_t i = 0; i < n; ++i) dp[i] = math::mse_grad_element(p[i], t[i], k);
}

// ---------------------------------------------------------------- binary crossentropy (mean over all elements)
void bce(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  const bool logits = a.node.attrs.from_logits;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += math::bce_term(p[i], t[i], logits);
  *a.output<float>() = static_cast<float>(s / static_cast<double>(n ? n : 1));
}
void bce_grad(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  const float k = scale_of(a, 2, n);
  const bool logits = a.node.attrs.from_logits;
  float* dp = a.output<float>();
  for (int64_t i = 0; i < n; ++i) dp[i] = math::bce_grad_element(p[i], t[i], k, logits);
}

// ---------------------------------------------------------------- categorical crossentropy
// logits: -sum t * log_softmax(x). probabilities: q = p / sum(p), -sum t * log(clip(q)).
void cce(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  double s = 0;
  for (int64_t r = 0; r < d.rows; ++r)
    s += math::cce_row(p + r * d.classes, t + r * d.classes, d.classes, a.node.attrs.from_logits);
  *a.output<float>() = static_cast<float>(s / static_cast<double>(d.rows ? d.rows : 1));
}
void cce_grad(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  const float k = scale_of(a, 2, d.rows);
  float* dp = a.output<float>();
  for (int64_t r = 0; r < d.rows; ++r)
    math::cce_grad_row(p + r * d.classes, t + r * d.classes, dp + r * d.classes, d.classes, k,
                       a.node.attrs.from_logits);
}

// ---------------------------------------------------------------- sparse categorical crossentropy
// logits: logsumexp(x) - x_y. probabilities (Keras): log(sum(clip(p))) - log(clip(p_y)).
// The per-row math is backends/math/losses.h, shared with the CUDA kernels; the mean over rows sums in double.
void sparse_cce(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const int32_t* y = checked_labels(a, d);
  double s = 0;
  for (int64_t r = 0; r < d.rows; ++r)
    s += a.node.attrs.from_logits ? math::sparse_cce_logits_row(p + r * d.classes, d.classes, y[r])
                                  : math::sparse_cce_probabilities_row(p + r * d.classes, d.classes, y[r]);
  *a.output<float>() = static_cast<float>(s / static_cast<double>(d.rows ? d.rows : 1));
}
void sparse_cce_grad(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const int32_t* y = checked_labels(a, d);
  const float k = scale_of(a, 2, d.rows);
  float* dp = a.output<float>();
  for (int64_t r = 0; r < d.rows; ++r) {
    if (a.node.attrs.from_logits)
      math::sparse_cce_logits_grad_row(p + r * d.classes, dp + r * d.classes, d.classes, y[r], k);
    else
      math::sparse_cce_probabilities_grad_row(p + r * d.classes, dp + r * d.classes, d.classes, y[r], k);
  }
}

// ---------------------------------------------------------------- metrics (fraction correct in the batch)
int64_t argmax(const float* x, int64_t n) { return math::argmax_row(x, n); }

void sparse_categorical_accuracy(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const auto* y = a.input<int32_t>(1);
  int64_t hits = 0;
  for (int64_t r = 0; r < d.rows; ++r) hits += argmax(p + r * d.classes, d.classes) == y[r];
  *a.output<float>() = static_cast<float>(hits) / static_cast<float>(d.rows ? d.rows : 1);
}
void categorical_accuracy(const KernelArgs& a) {
  const Dims d = dims(a);
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  int64_t hits = 0;
  for (int64_t r = 0; r < d.rows; ++r) hits += math::categorical_hit(p + r * d.classes, t + r * d.classes, d.classes);
  *a.output<float>() = static_cast<float>(hits) / static_cast<float>(d.rows ? d.rows : 1);
}
void binary_accuracy(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  const float* p = a.input<float>(0);
  const float* t = a.input<float>(1);
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += math::binary_hit(p[i], t[i]);
  *a.output<float>() = static_cast<float>(hits) / static_cast<float>(n ? n : 1);
}

}  // namespace

void register_loss_kernels() {
  using graph::register_kernel;
  constexpr auto cpu = DeviceKind::cpu;
  constexpr auto f32 = DType::f32;
  register_kernel(cpu, Op::MseLoss, f32, mse);
  register_kernel(cpu, Op::MseLossGrad, f32, mse_grad);
  register_kernel(cpu, Op::BceLoss, f32, bce);
  register_kernel(cpu, Op::BceLossGrad, f32, bce_grad);
  register_kernel(cpu, Op::CceLoss, f32, cce);
  register_kernel(cpu, Op::CceLossGrad, f32, cce_grad);
  register_kernel(cpu, Op::SparseCceLoss, f32, sparse_cce);
  register_kernel(cpu, Op::SparseCceLossGrad, f32, sparse_cce_grad);
  register_kernel(cpu, Op::BinaryAccuracy, f32, binary_accuracy);
  register_kernel(cpu, Op::CategoricalAccuracy, f32, categorical_accuracy);
  register_kernel(cpu, Op::SparseCategoricalAccuracy, f32, sparse_categorical_accuracy);
}

}  // namespace tk::cpu
