// The op-table rules of the fused attention ops (graph/attention_rules.h).
#include "graph/attention_rules.h"

#include "graph/tensor_ops.h"
#include "graph/tensor_rules.h"

namespace tk::graph {
namespace {

// rules::shape_error with the node's heads and batch after the input shapes.
[[noreturn]] void attention_shape_error(const Graph& g, int node, const std::string& why) {
  rules::shape_error(
      g, node, why,
      ", heads " + std::to_string(g[node].attrs.heads) + ", batch " + std::to_string(g[node].attrs.batch));
}

// Checks q, k, v (inputs first..first+2) and the mask (input `mask`, when the node has it) and returns their layout.
AttentionLayout check(const Graph& g, int node, size_t first, size_t mask) {
  const Node& n = g[node];
  if (n.inputs.size() != mask && n.inputs.size() != mask + 1)
    attention_shape_error(
        g, node,
        n.op == Op::Attention ? "takes q, k, v and optionally a mask" : "takes do, q, k, v, o and optionally a mask");
  const Shape &q = g[n.inputs[first]].shape, &k = g[n.inputs[first + 1]].shape, &v = g[n.inputs[first + 2]].shape;
  const int64_t heads = n.attrs.heads, batch = n.attrs.batch;
  if (heads < 1 || batch < 1) attention_shape_error(g, node, "heads and batch must be positive");
  if (q.rank() != 2 || k.rank() != 2 || v.rank() != 2) attention_shape_error(g, node, "q, k and v must be matrices");
  if (q[0] % batch != 0 || k[0] % batch != 0 || q[0] == 0 || k[0] == 0 || v[0] != k[0])
    attention_shape_error(g, node, "q's rows must be batch * T, k's and v's batch * S (T, S >= 1)");
  if (q[1] % heads != 0 || v[1] % heads != 0 || q[1] == 0 || v[1] == 0 || k[1] != q[1])
    attention_shape_error(g, node, "q's and k's columns must be heads * key_dim, v's heads * value_dim");
  const AttentionLayout L = attention_layout(g, n);
  if (L.has_mask && g[n.inputs[mask]].shape != Shape{batch, L.steps_q, L.steps_k})
    attention_shape_error(g, node, "the mask must be (batch, T, S)");
  return L;
}

}  // namespace

AttentionLayout attention_layout(const Graph& g, const Node& n) {
  AttentionLayout L;
  const size_t first = n.op == Op::AttentionGrad ? 1 : 0;
  const Shape &q = g[n.inputs[first]].shape, &k = g[n.inputs[first + 1]].shape, &v = g[n.inputs[first + 2]].shape;
  L.batch = n.attrs.batch, L.heads = n.attrs.heads;
  L.steps_q = q[0] / L.batch, L.steps_k = k[0] / L.batch, L.dim = q[1] / L.heads, L.dim_v = v[1] / L.heads;
  L.causal = n.attrs.causal, L.scale = n.attrs.score_scale;
  L.has_mask = n.inputs.size() == (n.op == Op::AttentionGrad ? 6u : 4u);
  return L;
}

namespace rules {

Shape shape_attention(const Graph& g, int node) {
  const AttentionLayout L = check(g, node, 0, 3);
  return Shape{L.batch * L.steps_q, L.heads * L.dim_v};
}

Shape shape_attention_grad(const Graph& g, int node) {
  const Node& n = g[node];
  const AttentionLayout L = check(g, node, 1, 5);
  const Shape o{L.batch * L.steps_q, L.heads * L.dim_v};
  if (g[n.inputs[0]].shape != o || g[n.inputs[4]].shape != o)
    attention_shape_error(g, node, "do and o must both be the attention's output " + o.to_string());
  return Shape{L.grad_size()};
}

void grad_attention(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  const AttentionLayout L = attention_layout(b.g, n);
  std::vector<int> in = {dy, n.inputs[0], n.inputs[1], n.inputs[2], node};
  if (L.has_mask) in.push_back(n.inputs[3]);
  const int d = b.add(Op::AttentionGrad, std::move(in), n.attrs);
  if (need[0]) dx[0] = ops::part(b, d, L.dq(), Shape{L.batch * L.steps_q, L.heads * L.dim});
  if (need[1]) dx[1] = ops::part(b, d, L.dk(), Shape{L.batch * L.steps_k, L.heads * L.dim});
  if (need[2]) dx[2] = ops::part(b, d, L.dv(), Shape{L.batch * L.steps_k, L.heads * L.dim_v});
  // The mask is a 0/1 condition: no gradient (as Where's condition).
}

}  // namespace rules
}  // namespace tk::graph
