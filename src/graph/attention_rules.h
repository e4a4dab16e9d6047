// The fused scaled-dot-product attention ops (graph/op.h: Attention, AttentionGrad): their layout, which the layer
// (nn/layers/multi_head_attention.cpp), the gradient rule and both backends' kernels share, and their op-table rules.
//
// Attention(q (N*T, H*D), k (N*S, H*D), v (N*S, H*Dv) [, mask (N, T, S)]) -> o (N*T, H*Dv): per sample n and head h,
//   scores = score_scale * q_h k_h^T  (T, S);  p = softmax over the keys a query may see;  o_h = p v_h
// with q_h the columns [h*D, (h+1)*D) of sample n's T rows (the layout the projection GEMMs write: no transposes).
// A query step sees key step j unless attrs.causal and j > i, or mask[n, i, j] == 0. Masked keys take no part: a
// query row that sees no key gives 0 (Keras' masked Softmax then zeroes the row); a NaN or +inf score among the seen
// ones makes the row NaN, as softmax does (a row whose seen scores are all -inf: NaN too, 0 / 0).
// AttentionGrad(do, q, k, v, o [, mask]) -> flat (N*T*H*D + N*S*H*D + N*S*H*Dv): dq, dk, dv one after the other, each
// in its input's layout (AttentionLayout::dq/dk/dv give the offsets); the scores and the per-row logsumexp are
// recomputed from q and k blockwise, so no (T, S) value is kept between the two ops.
//
//   const graph::AttentionLayout L = graph::attention_layout(g, node);
//   float* dk = grad + L.dk();   // (N*S, H*D)
#pragma once
#include <cstdint>

#include "graph/graph.h"

namespace tk::graph {

struct AttentionLayout {
  int64_t batch = 0, heads = 0, steps_q = 0, steps_k = 0, dim = 0, dim_v = 0;  // N, H, T, S, D, Dv
  bool causal = false, has_mask = false;
  float scale = 1.0f;

  int64_t q_size() const { return batch * steps_q * heads * dim; }
  int64_t k_size() const { return batch * steps_k * heads * dim; }
  int64_t v_size() const { return batch * steps_k * heads * dim_v; }
  int64_t grad_size() const { return q_size() + k_size() + v_size(); }
  // Element offsets into AttentionGrad's output.
  int64_t dq() const { return 0; }
  int64_t dk() const { return q_size(); }
  int64_t dv() const { return q_size() + k_size(); }
};

// The layout of an Attention or AttentionGrad node (read from its attrs and inputs' shapes).
AttentionLayout attention_layout(const Graph& g, const Node& node);
inline AttentionLayout attention_layout(const Graph& g, int node) { return attention_layout(g, g[node]); }

namespace rules {
Shape shape_attention(const Graph& g, int node);
Shape shape_attention_grad(const Graph& g, int node);
void grad_attention(GradBuilder& b, int node, int dy, const bool* need, int* dx);
}  // namespace rules

}  // namespace tk::graph
