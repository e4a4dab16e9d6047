// The op-table rules of the fused LSTM ops (graph/lstm_rules.h).
#include "graph/lstm_rules.h"

#include "graph/tensor_ops.h"
#include "graph/tensor_rules.h"

namespace tk::graph {

LstmLayout lstm_layout(const Graph& g, const Node& n) {
  LstmLayout L;
  L.reverse = n.attrs.reverse;
  if (n.op == Op::LstmSequence) {
    const Shape &p = g[n.inputs[0]].shape, &h0 = g[n.inputs[2]].shape;  // (T * N, 4u), (N, u)
    L.batch = h0[0], L.units = p[1] / 4, L.steps = L.batch > 0 ? p[0] / L.batch : 0;
  } else {
    const Shape& y = g[n.inputs[1]].shape;  // (6T + 2, N, u)
    L.steps = (y[0] - 2) / 6, L.batch = y[1], L.units = y[2];
  }
  return L;
}

namespace rules {

Shape shape_lstm_sequence(const Graph& g, int node) {
  const Node& n = g[node];
  const Shape &p = g[n.inputs[0]].shape, &w = g[n.inputs[1]].shape, &h0 = g[n.inputs[2]].shape;
  if (p.rank() != 2 || p[1] % 4 != 0 || p[1] == 0) shape_error(g, node, "proj must be (steps * batch, 4 * units)");
  const int64_t u = p[1] / 4;
  if (w != Shape{u, 4 * u}) shape_error(g, node, "recurrent_kernel must be (units, 4 * units)");
  if (h0.rank() != 2 || h0[0] < 1 || h0[1] != u || g[n.inputs[3]].shape != h0)
    shape_error(g, node, "the initial states must both be (batch >= 1, units)");
  if (p[0] < h0[0] || p[0] % h0[0] != 0) shape_error(g, node, "proj's rows must be steps >= 1 times the batch");
  return Shape{6 * (p[0] / h0[0]) + 2, h0[0], u};
}

Shape shape_lstm_sequence_grad(const Graph& g, int node) {
  const Node& n = g[node];
  const Shape &dy = g[n.inputs[0]].shape, &y = g[n.inputs[1]].shape, &w = g[n.inputs[2]].shape;
  if (y.rank() != 3 || y[0] < 8 || (y[0] - 2) % 6 != 0 || dy != y)
    shape_error(g, node, "dy and y must both be an LstmSequence's (6 * steps + 2, batch, units)");
  if (w != Shape{y[2], 4 * y[2]}) shape_error(g, node, "recurrent_kernel must be (units, 4 * units)");
  return Shape{(y[0] - 2) / 6 + 1, y[1], 4 * y[2]};
}

void grad_lstm_sequence(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  const LstmLayout L = lstm_layout(b.g, node);
  const int64_t steps = L.steps, batch = L.batch, u = L.units;
  const int d = b.add(Op::LstmSequenceGrad, {dy, node, n.inputs[1]}, n.attrs);  // (T + 1, N, 4u)
  if (need[0]) dx[0] = ops::part(b, d, 0, Shape{steps * batch, 4 * u});
  if (need[1]) {  // dU = sum over steps of h_prev^T dz: one GEMM over the T blocks of h the steps multiplied by U
    const int h_prev = ops::part(b, node, L.h(L.first_prev_row()), Shape{steps * batch, u});
    Attrs at;
    at.trans_a = true;
    dx[1] = b.add(Op::MatMul, {h_prev, ops::part(b, d, 0, Shape{steps * batch, 4 * u})}, at);
  }
  if (need[2]) dx[2] = ops::part(b, d, L.dh0(), Shape{batch, u});
  if (need[3]) dx[3] = ops::part(b, d, L.dc0(), Shape{batch, u});
}

}  // namespace rules
}  // namespace tk::graph
