// A dataflow graph of primitive ops with static shapes (one graph per program and batch size).
//
//   tk::graph::Graph g;
//   int x = g.input("x", {128, 784});
//   int w = g.variable("dense/kernel", weights);       // weights: a Tensor kept alive by its owner
//   int y = g.add(Op::MatMul, {x, w});                 // shape (128, 256) and dtype inferred and checked
//   int h = g.cast(y, tk::DType::bf16);                // explicit: ops never mix dtypes
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "graph/op.h"
#include "trainkit/core/dtype.h"
#include "trainkit/core/tensor.h"

namespace tk::graph {

struct Node {
  Op op;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::f32;  // of the output (of the in-place operand for ops without output)
  Attrs attrs;
  std::string name;  // owner tag: "layer/what", used in plans and error messages
};

struct Graph {
  std::vector<Node> nodes;

  const Node& operator[](int id) const { return nodes[static_cast<size_t>(id)]; }
  Node& operator[](int id) { return nodes[static_cast<size_t>(id)]; }
  int size() const { return static_cast<int>(nodes.size()); }

  int input(std::string name, Shape shape, DType dtype = DType::f32);
  int variable(std::string name, Tensor& storage);
  // A Variable whose storage does not exist yet (memory planning only; a Program cannot run it).
  int placeholder_variable(std::string name, Shape shape, DType dtype = DType::f32);
  int fill(float value, Shape shape = {}, DType dtype = DType::f32);
  // x itself when it already has `dtype`, else a Cast.
  int cast(int x, DType dtype, std::string name = {});
  // Adds an op; infers and validates its output shape and dtype (the op table's rules; never promotes).
  int add(Op op, std::vector<int> inputs, Attrs attrs = {}, std::string name = {});
};

// Emits ops into a graph under one owner name: what layers and gradient rules build with (graph/tensor_ops.h).
// Gradient rules read forward values by id; with rematerialization, `remap` swaps a dropped forward
// value for its recomputed copy (emitted on demand, just before the gradient op that needs it).
struct OpBuilder {
  Graph& g;
  std::function<int(int)> remap = nullptr;
  std::string name = "grad";  // given to the nodes it adds: "grad:<the node being differentiated>"
  const Node& node(int id) const { return g[id]; }
  int add(Op op, std::vector<int> inputs, Attrs attrs = {}) {
    if (remap)
      for (int& in : inputs) in = remap(in);
    return g.add(op, std::move(inputs), std::move(attrs), name);
  }
};
using GradBuilder = OpBuilder;

}  // namespace tk::graph
