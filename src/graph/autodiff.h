// Reverse-mode automatic differentiation: appends gradient ops to the graph.
//
//   std::vector<int> grads = tk::graph::gradients(g, {loss}, {w1, b1, w2});
//   // grads[i]: value id of d(sum of losses)/d(wrt[i]), or -1 if wrt[i] does not influence the loss.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace tk::graph {

// Each loss in `losses` is a scalar seeded with gradient 1 (so the gradient is that of their sum).
std::vector<int> gradients(Graph& g, const std::vector<int>& losses, const std::vector<int>& wrt);

}  // namespace tk::graph
