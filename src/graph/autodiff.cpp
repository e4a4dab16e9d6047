#include "graph/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "trainkit/core/error.h"

namespace tk::graph {

double op_flops(const Graph& g, int node) {
  const Node& n = g[node];
  if (n.op == Op::MatMul) {
    const Shape& a = g[n.inputs[0]].shape;
    return 2.0 * double(n.shape.numel()) * double(n.attrs.trans_a ? a[0] : a[1]);
  }
  if (n.op == Op::Conv2D) {
    const Shape& w = g[n.inputs[1]].shape;
    return 2.0 * double(n.shape.numel()) * double(w[0] * w[1] * w[2]);
  }
  return op_info(n.op).has_output ? double(n.shape.numel()) : 0.0;
}

std::vector<int> gradients(Graph& g, const std::vector<int>& losses, const std::vector<int>& wrt, RematStats* remat,
                           int seed) {
  const int n = g.size();
  // Forward pass: which values depend on a variable we differentiate with respect to.
  std::vector<char> depends(static_cast<size_t>(n), 0);
  for (int w : wrt) depends[static_cast<size_t>(w)] = 1;
  for (int i = 0; i < n; ++i)
    for (int in : g[i].inputs)
      if (depends[static_cast<size_t>(in)]) depends[static_cast<size_t>(i)] = 1;

  std::vector<int> grad(static_cast<size_t>(n), -1);
  auto accumulate = [&](int value, int dv) {
    int& slot = grad[static_cast<size_t>(value)];
    slot = slot < 0 ? dv : g.add(Op::Add, {slot, dv}, {}, "grad/accumulate");
  };
  for (int loss : losses) {
    if (g[loss].shape.rank() != 0) throw InvalidArgument("gradients: loss '" + g[loss].name + "' is not a scalar");
    accumulate(loss, seed >= 0 ? seed : g.fill(1.0f));
  }

  const int last = *std::max_element(losses.begin(), losses.end());
  GradBuilder builder{g};
  std::vector<char> recomputable;
  std::vector<int> copies;
  std::function<int(int)> recompute;
  if (remat) {
    // Forward values that may be dropped and recomputed; every k-th one stays as a checkpoint.
    recomputable.assign(static_cast<size_t>(n), 0);
    std::vector<int> forward;
    for (int id = 0; id < n; ++id) {
      const Node& node = g[id];
      const bool source = is_source(node.op);
      // A node whose kernel runs a collective (synchronized BatchNormalization's statistics) is kept: recomputing it
      // would run the collective again. (BnApply carries the group for its gradient and is recomputed as usual.)
      const bool collective = node.attrs.collective && (node.op == Op::BnStats || node.op == Op::AllReduce);
      if (!source && op_info(node.op).has_output && !collective) forward.push_back(id);
      remat->forward_flops += op_flops(g, id);
    }
    const auto k = static_cast<size_t>(std::ceil(std::sqrt(double(std::max<size_t>(forward.size(), 1)))));
    for (size_t i = 0; i < forward.size(); ++i)
      if ((i + 1) % k != 0) recomputable[static_cast<size_t>(forward[i])] = 1;
    copies.assign(static_cast<size_t>(n), -1);
    recompute = [&](int v) -> int {
      if (v < 0 || v >= n || !recomputable[static_cast<size_t>(v)]) return v;
      if (copies[static_cast<size_t>(v)] >= 0) return copies[static_cast<size_t>(v)];
      Node original = g[v];
      for (int& in : original.inputs) in = recompute(in);
      const int copy = g.add(original.op, original.inputs, original.attrs, original.name + "/recompute");
      copies[static_cast<size_t>(v)] = copy;
      ++remat->recomputed_ops;
      remat->recomputed_flops += op_flops(g, copy);
      return copy;
    };
    builder.remap = [&recompute](int v) { return recompute(v); };
  }
  for (int id = last; id >= 0; --id) {
    int dy = grad[static_cast<size_t>(id)];
    if (dy < 0 || !depends[static_cast<size_t>(id)]) continue;
    const Node& node = g[id];
    if (node.inputs.empty()) continue;
    std::vector<char> need(node.inputs.size());
    bool any = false;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      any |= (need[i] = depends[static_cast<size_t>(node.inputs[i])]) != 0;
    if (!any) continue;
    const OpInfo& info = op_info(node.op);
    if (!info.grad) throw Unsupported("op " + std::string(info.name) + " ('" + node.name + "') has no gradient rule");
    std::vector<int> dx(node.inputs.size(), -1);
    std::vector<int> inputs = node.inputs;  // the builder may grow g and invalidate `node`
    builder.name = "grad:" + node.name;     // so memory plans can say whose gradient a buffer holds
    info.grad(builder, id, dy, reinterpret_cast<const bool*>(need.data()), dx.data());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (need[i] && dx[i] >= 0) accumulate(inputs[i], dx[i]);
  }

  std::vector<int> out;
  out.reserve(wrt.size());
  for (int w : wrt) out.push_back(grad[static_cast<size_t>(w)]);
  return out;
}

}  // namespace tk::graph
