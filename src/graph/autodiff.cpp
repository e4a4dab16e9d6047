#include "graph/autodiff.h"

#include <algorithm>

#include "trainkit/core/error.h"

namespace tk::graph {

std::vector<int> gradients(Graph& g, const std::vector<int>& losses, const std::vector<int>& wrt) {
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
    accumulate(loss, g.fill(1.0f));
  }

  const int last = *std::max_element(losses.begin(), losses.end());
  GradBuilder builder{g};
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
