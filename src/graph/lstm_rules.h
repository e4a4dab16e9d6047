// The fused LSTM ops (graph/op.h: LstmSequence, LstmSequenceGrad): the layout of their outputs, which the layer
// (nn/layers/recurrent.cpp), the gradient rule and both backends' kernels share, and their op-table rules.
//
// LstmSequence(proj (T * N, 4u), U (u, 4u), h0 (N, u), c0 (N, u)) runs Keras' LSTM cell (implementation 2, sigmoid
// gates, tanh) over the T steps: z = proj[t] + h U; i, f, g, o = sigmoid(z0), sigmoid(z1), tanh(z2), sigmoid(z3);
// c = f * c + i * g; h = o * tanh(c). Its output y (6T + 2, N, u) holds, in time order:
//   rows [0, T + 1)       the h states: time t's output at out_row(t), the initial state at init_row()
//   rows [T + 1, 2T + 2)  the c states, the same way
//   rows [2T + 2, 6T + 2) the gate activations i, f, g, o of time t as (N, 4u) (read by the gradient)
// attrs.reverse (go_backwards): step s reads time t = T - 1 - s. The states of the step before time t sit at
// prev_row(t), so the h each step multiplied by U is one contiguous block (T rows): the gradient's dU is one GEMM.
// proj is time-major (time t's rows at t * N), as the input projection's GEMM writes it (no reshape: Reshape copies).
// Every row is differentiable (a gradient reaching the gate rows flows into z too; the layer reads h and c only).
// LstmSequenceGrad(dy, y, U) -> (T + 1, N, 4u): rows [0, T) the gradient of proj (time order), then dh0 (N, u), dc0
// (N, u) and 2Nu zeros.
//
//   const graph::LstmLayout L{steps, batch, units, reverse};
//   float* h_t = y + L.h(L.out_row(t));   // (N, u)
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace tk::graph {

struct LstmLayout {
  int64_t steps = 0, batch = 0, units = 0;
  bool reverse = false;

  int64_t state() const { return batch * units; }  // elements of one (N, u) state
  int64_t rows() const { return 6 * steps + 2; }
  int64_t out_row(int64_t t) const { return reverse ? t : t + 1; }
  int64_t prev_row(int64_t t) const { return reverse ? t + 1 : t; }
  int64_t init_row() const { return reverse ? steps : 0; }
  int64_t last_row() const { return reverse ? 0 : steps; }    // the state after the last step
  int64_t first_prev_row() const { return reverse ? 1 : 0; }  // prev_row(0): T rows of h multiplied by U from here
  // Element offsets into y.
  int64_t h(int64_t row) const { return row * state(); }
  int64_t c(int64_t row) const { return (steps + 1 + row) * state(); }
  int64_t gates(int64_t t) const { return (2 * (steps + 1) + 4 * t) * state(); }
  // Element offsets into the gradient's output.
  int64_t dh0() const { return steps * 4 * state(); }
  int64_t dc0() const { return dh0() + state(); }
};

// The layout of an LstmSequence or LstmSequenceGrad node (read from its inputs' shapes).
LstmLayout lstm_layout(const Graph& g, const Node& node);
inline LstmLayout lstm_layout(const Graph& g, int node) { return lstm_layout(g, g[node]); }

namespace rules {
Shape shape_lstm_sequence(const Graph& g, int node);
Shape shape_lstm_sequence_grad(const Graph& g, int node);
void grad_lstm_sequence(GradBuilder& b, int node, int dy, const bool* need, int* dx);
}  // namespace rules

}  // namespace tk::graph
