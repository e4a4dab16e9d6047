#include "graph/graph.h"

#include "trainkit/core/error.h"

namespace tk::graph {

int Graph::input(std::string name, Shape shape, DType dtype) {
  Attrs at;
  at.shape = std::move(shape);
  int id = add(Op::Input, {}, std::move(at), std::move(name));
  nodes.back().dtype = dtype;
  return id;
}

int Graph::variable(std::string name, Tensor& storage) {
  Attrs at;
  at.shape = storage.shape();
  at.external = storage.raw();
  int id = add(Op::Variable, {}, std::move(at), std::move(name));
  nodes.back().dtype = storage.dtype();
  return id;
}

int Graph::placeholder_variable(std::string name, Shape shape, DType dtype) {
  Attrs at;
  at.shape = std::move(shape);
  int id = add(Op::Variable, {}, std::move(at), std::move(name));
  nodes.back().dtype = dtype;
  return id;
}

int Graph::fill(float value, Shape shape) {
  Attrs at;
  at.value = value;
  at.shape = std::move(shape);
  return add(Op::Fill, {}, std::move(at), "fill");
}

int Graph::add(Op op, std::vector<int> inputs, Attrs attrs, std::string name) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && static_cast<int>(inputs.size()) != info.arity)
    throw InvalidArgument(std::string(info.name) + " '" + name + "' takes " + std::to_string(info.arity) +
                          " inputs, got " + std::to_string(inputs.size()));
  if (info.arity < 0 && inputs.empty()) throw InvalidArgument(std::string(info.name) + " '" + name + "' needs inputs");
  for (int in : inputs)
    if (in < 0 || in >= size()) throw InvalidArgument(std::string(info.name) + ": input id out of range");
  nodes.push_back(Node{op, std::move(inputs), Shape{}, DType::f32, std::move(attrs), std::move(name)});
  int id = size() - 1;
  try {
    nodes.back().shape = info.shape(*this, id);
  } catch (...) {
    nodes.pop_back();
    throw;
  }
  return id;
}

}  // namespace tk::graph
