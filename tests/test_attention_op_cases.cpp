// The op harness's cases for the fused attention ops (graph/attention_rules.h; tests/op_harness.h): finite-difference
// gradients of Attention (plain, causal with more keys than queries, with a mask that hides a whole query row), a
// forward case of AttentionGrad, and NaN/Inf in q, k and v against a double-precision reference written from
// softmax's rule. gradient_cases(), forward_cases() (test_op_gradients.cpp) and nonfinite_cases()
// (test_ops_nonfinite.cpp) append these. tests/test_attention_fused.cpp checks the op against the composite
// (BatchMatMul, Softmax) on the blocked paths (sequences longer than a block).
#include <cmath>

#include "graph/attention_rules.h"
#include "op_harness.h"

namespace tk::graph::harness {
namespace {

struct Dims {
  int64_t n, t, s, h, d, dv;
};

Attrs attention_attrs(const Dims& x, bool causal) {
  Attrs at;
  at.heads = x.h;
  at.batch = x.n;
  at.causal = causal;
  at.score_scale = 1.0f / std::sqrt(static_cast<float>(x.d));
  return at;
}

std::vector<Shape> attention_inputs(const Dims& x, bool mask) {
  std::vector<Shape> s = {{x.n * x.t, x.h * x.d}, {x.n * x.s, x.h * x.d}, {x.n * x.s, x.h * x.dv}};
  if (mask) s.push_back({x.n, x.t, x.s});
  return s;
}

// The mask (N, T, S): key j hidden from query i when (i + 2 j) % 5 == 0, and query row 1 of sample 0 sees nothing.
void fill_mask(float* p, const Dims& x) {
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t i = 0; i < x.t; ++i)
      for (int64_t j = 0; j < x.s; ++j)
        p[(n * x.t + i) * x.s + j] = (n == 0 && i == 1) || (i + 2 * j) % 5 == 0 ? 0.0f : 1.0f;
}

InitFn attention_init(const Dims& x) {
  return [x](int i, float* p, int64_t n, std::mt19937& g) {
    if (i == 3) return fill_mask(p, x);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (int64_t k = 0; k < n; ++k) p[k] = d(g);
  };
}

Case attention_case(std::string label, const Dims& x, bool causal, bool mask) {
  std::vector<bool> diff = {true, true, true};
  if (mask) diff.push_back(false);
  return {std::move(label),           Op::Attention,    attention_inputs(x, mask), diff,
          attention_attrs(x, causal), attention_init(x)};
}

// Attention in double from the float32 inputs: softmax over the keys a query sees (a NaN or +inf score: NaN row;
// none seen: 0), then the weights times every key's value (an unseen key's weight is 0, and 0 * inf is NaN, as the
// composite's probs . v).
std::vector<Tensor> attention_reference(const std::vector<Tensor>& in, const Dims& x, bool causal) {
  Tensor out = Tensor::zeros(Shape{x.n * x.t, x.h * x.dv});
  const float *q = in[0].data<float>(), *k = in[1].data<float>(), *v = in[2].data<float>();
  const float* mask = in.size() > 3 ? in[3].data<float>() : nullptr;
  const double scale = 1.0 / std::sqrt(static_cast<double>(x.d));
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t h = 0; h < x.h; ++h)
      for (int64_t i = 0; i < x.t; ++i) {
        std::vector<double> s(static_cast<size_t>(x.s), -INFINITY);
        std::vector<bool> seen(static_cast<size_t>(x.s), false);
        bool any = false;
        double m = -INFINITY;
        for (int64_t j = 0; j < x.s; ++j) {
          if ((causal && j > i) || (mask && mask[(n * x.t + i) * x.s + j] == 0.0f)) continue;
          double dot = 0;
          for (int64_t e = 0; e < x.d; ++e)
            dot += double(q[(n * x.t + i) * x.h * x.d + h * x.d + e]) * k[(n * x.s + j) * x.h * x.d + h * x.d + e];
          s[size_t(j)] = dot * scale;
          seen[size_t(j)] = any = true;
          m = std::isnan(m) || std::isnan(s[size_t(j)]) ? NAN : std::max(m, s[size_t(j)]);
        }
        double l = 0;
        std::vector<double> p(static_cast<size_t>(x.s), 0.0);
        for (int64_t j = 0; j < x.s; ++j)
          if (seen[size_t(j)]) l += p[size_t(j)] = std::exp(s[size_t(j)] - m);
        for (int64_t e = 0; e < x.dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < x.s; ++j) acc += p[size_t(j)] * v[(n * x.s + j) * x.h * x.dv + h * x.dv + e];
          out.data<float>()[(n * x.t + i) * x.h * x.dv + h * x.dv + e] = any ? static_cast<float>(acc / l) : 0.0f;
        }
      }
  return {out};
}

}  // namespace

std::vector<Case> attention_gradient_cases() {
  return {attention_case("Attention", {2, 3, 4, 2, 3, 2}, false, false),
          attention_case("Attention causal", {1, 4, 5, 2, 2, 3}, true, false),
          attention_case("Attention mask", {2, 3, 4, 1, 3, 2}, false, true)};
}

std::vector<Case> attention_forward_cases() {
  std::vector<Case> c;  // (forward_cases() runs the gradient cases forward too)
  // The gradient op alone: do, q, k, v and o are any values (o enters only through rowsum(do * o)).
  const Dims x{2, 5, 6, 2, 3, 4};
  std::vector<Shape> in = {{x.n * x.t, x.h * x.dv}};
  for (const Shape& s : attention_inputs(x, true)) in.push_back(s);
  in.insert(in.begin() + 4, Shape{x.n * x.t, x.h * x.dv});
  c.push_back({"AttentionGrad causal mask",
               Op::AttentionGrad,
               in,
               {},
               attention_attrs(x, true),
               [x](int i, float* p, int64_t n, std::mt19937& g) {
                 if (i == 5) return fill_mask(p, x);
                 std::uniform_real_distribution<float> d(-1.0f, 1.0f);
                 for (int64_t k = 0; k < n; ++k) p[k] = d(g);
               }});
  return c;
}

std::vector<NonFiniteCase> attention_nonfinite_cases() {
  std::vector<NonFiniteCase> c;
  const Dims x{2, 4, 5, 2, 3, 2};
  for (bool causal : {false, true})
    for (bool mask : {false, true}) {
      auto init = [x](int i, float* p, int64_t n, std::mt19937& g) {
        attention_init(x)(i, p, n, g);
        if (i == 0) p[0] = NAN;                   // sample 0, query 0, head 0: its row is NaN
        if (i == 1) p[x.h * x.d + 1] = INFINITY;  // sample 0, key 1, head 0: +-inf scores (NaN rows or weight 0)
        if (i == 1) p[n - 1] = -INFINITY;         // sample 1, the last key, head 1
        if (i == 2)
          p[x.n * x.s * x.h * x.dv - 1] = INFINITY;  // sample 1's last key's value, head 1: NaN where
                                                     // its weight is 0 (0 * inf), as the composite
        if (i == 2) p[0] = NAN;                      // sample 0, key 0 (seen by every query): head 0's outputs NaN
      };
      c.push_back({{std::string("Attention nonfinite") + (causal ? " causal" : "") + (mask ? " mask" : ""),
                    Op::Attention,
                    attention_inputs(x, mask),
                    {},
                    attention_attrs(x, causal),
                    init},
                   [x, causal](const std::vector<Tensor>& in) { return attention_reference(in, x, causal); }});
    }
  return c;
}

}  // namespace tk::graph::harness
