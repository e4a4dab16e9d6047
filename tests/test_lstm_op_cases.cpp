// The op harness's cases for the fused LSTM ops (graph/lstm_rules.h; tests/op_harness.h): finite-difference
// gradients of LstmSequence forwards and backwards in time, on the scalar columns and on the 16-lane vector columns
// of the CPU kernel (u = 20: 16 + 4), a forward case of LstmSequenceGrad, and NaN/Inf through the recurrence against
// a double-precision reference. gradient_cases(), forward_cases() (test_op_gradients.cpp) and nonfinite_cases()
// (test_ops_nonfinite.cpp) append these.
#include <cmath>

#include "graph/lstm_rules.h"
#include "op_harness.h"

namespace tk::graph::harness {
namespace {

// proj in [-1, 1], U and the initial states in [-0.4, 0.4]: the gates stay away from saturation, where a finite
// difference of float32 sees nothing.
void lstm_init(int i, float* p, int64_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> d(i == 0 ? -1.0f : -0.4f, i == 0 ? 1.0f : 0.4f);
  for (int64_t k = 0; k < n; ++k) p[k] = d(g);
}

std::vector<Shape> lstm_inputs(int64_t steps, int64_t batch, int64_t u) {
  return {{steps * batch, 4 * u}, {u, 4 * u}, {batch, u}, {batch, u}};
}

Case sequence_case(std::string label, int64_t steps, int64_t batch, int64_t u, bool reverse) {
  Attrs at;
  at.reverse = reverse;
  return {std::move(label), Op::LstmSequence, lstm_inputs(steps, batch, u), {true, true, true, true}, at, lstm_init};
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// LstmSequence in double from the float32 inputs (proj, U, h0, c0), in the op's layout.
std::vector<Tensor> lstm_reference(const std::vector<Tensor>& in, bool reverse) {
  const Shape &ps = in[0].shape(), &h0 = in[2].shape();  // (T * N, 4u), (N, u)
  const LstmLayout L{ps[0] / h0[0], h0[0], h0[1], reverse};
  const int64_t n = L.batch, u = L.units;
  const float *proj = in[0].data<float>(), *w = in[1].data<float>();
  Tensor out = Tensor::zeros(Shape{L.rows(), n, u});
  float* y = out.data<float>();
  std::vector<double> h(in[2].data<float>(), in[2].data<float>() + n * u);
  std::vector<double> c(in[3].data<float>(), in[3].data<float>() + n * u);
  for (int64_t k = 0; k < n * u; ++k) y[L.h(L.init_row()) + k] = in[2].data<float>()[k];
  for (int64_t k = 0; k < n * u; ++k) y[L.c(L.init_row()) + k] = in[3].data<float>()[k];
  for (int64_t s = 0; s < L.steps; ++s) {
    const int64_t t = reverse ? L.steps - 1 - s : s;
    std::vector<double> hn(h.size()), cn(c.size());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < u; ++j) {
        double z[4];
        for (int k = 0; k < 4; ++k) {
          z[k] = proj[(t * n + r) * 4 * u + k * u + j];
          for (int64_t m = 0; m < u; ++m) z[k] += h[static_cast<size_t>(r * u + m)] * w[m * 4 * u + k * u + j];
        }
        const double i = sigmoid_d(z[0]), f = sigmoid_d(z[1]), gg = std::tanh(z[2]), o = sigmoid_d(z[3]);
        const size_t e = static_cast<size_t>(r * u + j);
        cn[e] = f * c[e] + i * gg;
        hn[e] = o * std::tanh(cn[e]);
        const double gates[4] = {i, f, gg, o};
        for (int k = 0; k < 4; ++k) y[L.gates(t) + r * 4 * u + k * u + j] = static_cast<float>(gates[k]);
        y[L.h(L.out_row(t)) + static_cast<int64_t>(e)] = static_cast<float>(hn[e]);
        y[L.c(L.out_row(t)) + static_cast<int64_t>(e)] = static_cast<float>(cn[e]);
      }
    h = hn, c = cn;
  }
  return {out};
}

// Finite values, then NaN, +Inf and -Inf in proj (input 0) at fixed places.
void lstm_nonfinite_init(int i, float* p, int64_t n, std::mt19937& g) {
  lstm_init(i, p, n, g);
  if (i != 0) return;
  p[1] = NAN;  // time 0, row 0, gate i: row 0's h is NaN from then on (through h U, every unit)
  p[n / 2] = INFINITY;
  p[n - 2] = -INFINITY;  // saturated gates: finite states
}

}  // namespace

std::vector<Case> lstm_gradient_cases() {
  return {sequence_case("LstmSequence", 3, 2, 4, false), sequence_case("LstmSequence reverse", 3, 2, 4, true),
          sequence_case("LstmSequence vector lanes", 2, 2, 20, false)};
}

std::vector<Case> lstm_forward_cases() {
  std::vector<Case> c;  // (forward_cases() runs the gradient cases forward too)
  // The gradient op alone on arbitrary values (its math is elementwise and GEMMs: any values are valid inputs).
  Attrs at;
  c.push_back({"LstmSequenceGrad", Op::LstmSequenceGrad, {{20, 2, 4}, {20, 2, 4}, {4, 16}}, {}, at, lstm_init});
  at.reverse = true;
  c.push_back({"LstmSequenceGrad reverse vector lanes",
               Op::LstmSequenceGrad,
               {{14, 3, 20}, {14, 3, 20}, {20, 80}},
               {},
               at,
               lstm_init});
  return c;
}

std::vector<NonFiniteCase> lstm_nonfinite_cases() {
  std::vector<NonFiniteCase> c;
  for (bool reverse : {false, true})
    for (int64_t u : {int64_t{4}, int64_t{20}}) {
      Attrs at;
      at.reverse = reverse;
      c.push_back({{std::string("LstmSequence") + (reverse ? " reverse" : "") + " u" + std::to_string(u),
                    Op::LstmSequence,
                    lstm_inputs(3, 2, u),
                    {},
                    at,
                    lstm_nonfinite_init},
                   [reverse](const std::vector<Tensor>& in) { return lstm_reference(in, reverse); }});
    }
  return c;
}

}  // namespace tk::graph::harness
