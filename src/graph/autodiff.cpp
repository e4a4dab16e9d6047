#include "graph/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

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
  // Gradients of slices (grad_slice's zero Pads along one axis) that arrive first are held back: when the value's
  // gradient is read, disjoint pieces along one axis become one Concat (zeros in the gaps) instead of a full-size pad
  // and an Add per slice — an RNN's T per-step slices of its (T, N, 4u) input projection cost one copy, not T^2/2.
  // Anything else (overlapping pieces, another contribution) is added in arrival order, as without the hold.
  std::vector<std::vector<int>> held(static_cast<size_t>(n));
  auto pad_axis = [&](int v) {  // the one axis a zero Pad pads, or -1
    const Node& p = g[v];
    if (p.op != Op::Pad || p.attrs.value != 0.0f) return -1;
    int axis = -1;
    for (int i = 0; i < p.shape.rank(); ++i)
      if (p.attrs.pad_before[i] != 0 || p.attrs.pad_after[i] != 0) {
        if (axis >= 0) return -1;
        axis = i;
      }
    return axis;
  };
  auto add_to = [&](int& slot, int dv) { slot = slot < 0 ? dv : g.add(Op::Add, {slot, dv}, {}, "grad/accumulate"); };
  auto release = [&](int value) {  // the held pieces into grad[value]
    const std::vector<int> pieces = std::exchange(held[static_cast<size_t>(value)], {});
    int& slot = grad[static_cast<size_t>(value)];
    const int axis = pieces.empty() ? -1 : pad_axis(pieces[0]);
    bool disjoint = pieces.size() > 1 && slot < 0;
    std::vector<int> order = pieces;
    if (disjoint) {
      std::sort(order.begin(), order.end(),
                [&](int a, int b) { return g[a].attrs.pad_before[axis] < g[b].attrs.pad_before[axis]; });
      int64_t at = 0;
      for (int p : order) {
        disjoint &= pad_axis(p) == axis && g[p].shape == g[pieces[0]].shape && g[p].attrs.pad_before[axis] >= at;
        at = g[p].attrs.pad_before[axis] + g[g[p].inputs[0]].shape[axis];
      }
    }
    if (!disjoint) {
      for (int p : pieces) add_to(slot, p);
      return;
    }
    const Shape full = g[pieces[0]].shape;
    const DType dtype = g[pieces[0]].dtype;
    std::vector<int> parts;
    int64_t at = 0;
    auto zeros = [&](int64_t size) {
      Shape s = full;
      s[axis] = size;
      parts.push_back(g.fill(0.0f, s, dtype));
    };
    for (int p : order) {
      if (g[p].attrs.pad_before[axis] > at) zeros(g[p].attrs.pad_before[axis] - at);
      parts.push_back(g[p].inputs[0]);
      at = g[p].attrs.pad_before[axis] + g[g[p].inputs[0]].shape[axis];
    }
    if (full[axis] > at) zeros(full[axis] - at);
    Attrs at_concat;
    at_concat.axis = axis;
    slot = g.add(Op::Concat, parts, at_concat, "grad/accumulate");
  };
  auto accumulate = [&](int value, int dv) {
    int& slot = grad[static_cast<size_t>(value)];
    if (slot < 0 && pad_axis(dv) >= 0) {
      held[static_cast<size_t>(value)].push_back(dv);
      return;
    }
    // Something else arrived: the held pieces (if any) first, in order.
    for (int p : held[static_cast<size_t>(value)]) add_to(slot, p);
    held[static_cast<size_t>(value)].clear();
    add_to(slot, dv);
  };
  auto take = [&](int value) {
    if (!held[static_cast<size_t>(value)].empty()) release(value);
    return grad[static_cast<size_t>(value)];
  };
  for (int loss : losses) {
    // A non-scalar output takes an output gradient of its own shape and dtype as its seed (one output only).
    const bool output_gradient = seed >= 0 && losses.size() == 1 && g[loss].shape.rank() != 0;
    if (output_gradient && (g[seed].shape != g[loss].shape || g[seed].dtype != g[loss].dtype))
      throw InvalidArgument("gradients: the output gradient '" + g[seed].name + "' " + g[seed].shape.to_string() + " " +
                            std::string(dtype_name(g[seed].dtype)) + " does not match the output '" + g[loss].name +
                            "' " + g[loss].shape.to_string() + " " + std::string(dtype_name(g[loss].dtype)));
    if (g[loss].shape.rank() != 0 && !output_gradient)
      throw InvalidArgument("gradients: loss '" + g[loss].name + "' " + g[loss].shape.to_string() +
                            " is not a scalar (a single non-scalar output needs a seed of its shape)");
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
    int dy = take(id);
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
  for (int w : wrt) out.push_back(take(w));
  return out;
}

}  // namespace tk::graph
