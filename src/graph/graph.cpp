#include "graph/graph.h"

#include "trainkit/core/error.h"

namespace tk::graph {

namespace {
// The attrs of a source node holding a `shape` `dtype` value.
Attrs source_attrs(Shape shape, DType dtype) {
  Attrs at;
  at.shape = std::move(shape);
  at.dtype = dtype;
  return at;
}
}  // namespace

int Graph::input(std::string name, Shape shape, DType dtype) {
  return add(Op::Input, {}, source_attrs(std::move(shape), dtype), std::move(name));
}

int Graph::variable(std::string name, Tensor& storage) {
  Attrs at = source_attrs(storage.shape(), storage.dtype());
  at.external = storage.raw();
  return add(Op::Variable, {}, std::move(at), std::move(name));
}

int Graph::placeholder_variable(std::string name, Shape shape, DType dtype) {
  return add(Op::Variable, {}, source_attrs(std::move(shape), dtype), std::move(name));
}

int Graph::fill(float value, Shape shape, DType dtype) {
  Attrs at = source_attrs(std::move(shape), dtype);
  at.value = value;
  return add(Op::Fill, {}, std::move(at), "fill");
}

int Graph::cast(int x, DType dtype, std::string name) {
  if ((*this)[x].dtype == dtype) return x;
  Attrs at;
  at.dtype = dtype;
  return add(Op::Cast, {x}, std::move(at), std::move(name));
}

int Graph::add(Op op, std::vector<int> inputs, Attrs attrs, std::string name) {
  const OpInfo& info = op_info(op);
  const int extra = attrs.gated ? 1 : 0;  // a gated update also takes the step's StepControl
  if (info.arity >= 0 && static_cast<int>(inputs.size()) != info.arity + extra)
    throw InvalidArgument(std::string(info.name) + " '" + name + "' takes " + std::to_string(info.arity) +
                          " inputs, got " + std::to_string(inputs.size()));
  if (info.arity < 0 && inputs.empty()) throw InvalidArgument(std::string(info.name) + " '" + name + "' needs inputs");
  for (int in : inputs)
    if (in < 0 || in >= size()) throw InvalidArgument(std::string(info.name) + ": input id out of range");
  nodes.push_back(Node{op, std::move(inputs), Shape{}, DType::f32, std::move(attrs), std::move(name)});
  int id = size() - 1;
  try {
    nodes.back().shape = info.shape(*this, id);
    nodes.back().dtype = info.dtype(*this, id);
  } catch (...) {
    nodes.pop_back();
    throw;
  }
  return id;
}

}  // namespace tk::graph
