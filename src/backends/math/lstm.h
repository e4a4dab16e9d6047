// Keras' LSTM cell per element (implementation 2, sigmoid gates, tanh; graph/lstm_rules.h), forward and backward:
// the one definition the CUDA kernels (backends/cuda/lstm.cu) and the CPU kernels' scalar lanes
// (backends/cpu/lstm.cpp, whose vector lanes compute the same formulas 16 at a time) run. The order of operations
// is the composite's (nn/layers/recurrent.cpp), so the fused op and the composite differ only by rounding.
//
//   tk::math::lstm_cell(z_i, z_f, z_g, z_o, c_prev, &i, &f, &g, &o, &c, &h);
#pragma once
#include "backends/math/activations.h"
#include "backends/math/host_device.h"

namespace tk::math {

// z = x W + b + h U (one element of each gate's column block): the gate activations, the new c and h.
TK_HD void lstm_cell(float zi, float zf, float zg, float zo, float c_prev, float* i, float* f, float* g, float* o,
                     float* c, float* h) {
  *i = sigmoid(zi, 0.0f);
  *f = sigmoid(zf, 0.0f);
  *g = tanh_(zg, 0.0f);
  *o = sigmoid(zo, 0.0f);
  *c = *f * c_prev + *i * *g;
  *h = *o * tanh_(*c, 0.0f);
}

// The gradient through one element of a step: dh and dc reach h and c (from the layer's readers and from the next
// step), dg_i..dg_o the gate activations (from readers of the op's gate rows: usually none, so zeros); gives the
// gradients of the four z and of c_prev. tc = tanh(c), recomputed.
TK_HD void lstm_cell_grad(float i, float f, float g, float o, float c, float c_prev, float dh, float dc, float dg_i,
                          float dg_f, float dg_g, float dg_o, float* dzi, float* dzf, float* dzg, float* dzo,
                          float* dc_prev) {
  const float tc = tanh_(c, 0.0f);
  const float dct = dc + dh * o * (1.0f - tc * tc);
  *dzo = sigmoid_grad(dh * tc + dg_o, o, 0.0f);
  *dzi = sigmoid_grad(dct * g + dg_i, i, 0.0f);
  *dzf = sigmoid_grad(dct * c_prev + dg_f, f, 0.0f);
  *dzg = tanh_grad(dct * i + dg_g, g, 0.0f);
  *dc_prev = dct * f;
}

}  // namespace tk::math
