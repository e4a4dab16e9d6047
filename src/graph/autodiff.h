// Reverse-mode automatic differentiation: appends gradient ops to the graph.
//
//   std::vector<int> grads = tk::graph::gradients(g, {loss}, {w1, b1, w2});
//   // grads[i]: value id of d(sum of losses)/d(wrt[i]), or -1 if wrt[i] does not influence the loss.
#pragma once
#include <vector>

#include "graph/graph.h"

namespace tk::graph {

// Rematerialization (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"): keep every
// k-th forward value (k = ceil(sqrt(n))) as a checkpoint; gradient ops that need any other forward value
// get a copy recomputed from the nearest checkpoints, so forward activations die after the forward pass.
struct RematStats {
  int recomputed_ops = 0;
  double recomputed_flops = 0;  // extra work per step (GEMM/conv multiply-adds count 2 flops)
};

// Each loss in `losses` is a scalar seeded with gradient 1 (so the gradient is that of their sum), or with the
// float32 scalar value `seed` when given (loss scaling: the gradients of the sum times the scale). A single output of
// any shape may instead be seeded with `seed` of its shape and dtype (an output gradient, as PyTorch's y.backward(dy)
// or TensorFlow's output_gradients): the gradients of sum(y * seed), without that loss's ops.
// With `remat` non-null, rematerializes as above and fills it in.
std::vector<int> gradients(Graph& g, const std::vector<int>& losses, const std::vector<int>& wrt,
                           RematStats* remat = nullptr, int seed = -1);

// Approximate floating-point operations of one node (2·m·n·k for MatMul, 2·N·OH·OW·K·F for Conv2D,
// one per output element otherwise).
double op_flops(const Graph& g, int node);

}  // namespace tk::graph
