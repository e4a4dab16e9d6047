// Keras 3's activations by name: the ones with fused kernels and fusion rules of their own (relu, sigmoid, tanh,
// softmax, gelu, elu, leaky_relu) as their ops; every other name as the general Unary op's function
// (graph/tensor_fns.h), or a composite of the general ops (log_softmax, log_sigmoid).
#include <array>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"

namespace tk::nn {
namespace {
using graph::Op;
using graph::UnaryFn;
struct Entry {
  const char* name;
  Op op;  // Op::Unary: the function below
  UnaryFn fn = UnaryFn::kCount;
  float alpha = 0.0f;  // elu's alpha, leaky_relu's negative slope
};
// Keras 3 defaults: elu alpha 1.0, leaky_relu negative_slope 0.2, gelu exact (approximate=False).
constexpr std::array<Entry, 20> kActivations{{{"relu", Op::Relu},
                                              {"sigmoid", Op::Sigmoid},
                                              {"tanh", Op::Tanh},
                                              {"softmax", Op::Softmax},
                                              {"gelu", Op::Gelu},
                                              {"elu", Op::Elu, UnaryFn::kCount, 1.0f},
                                              {"leaky_relu", Op::LeakyRelu, UnaryFn::kCount, 0.2f},
                                              {"relu6", Op::Unary, UnaryFn::relu6},
                                              {"selu", Op::Unary, UnaryFn::selu},
                                              {"softplus", Op::Unary, UnaryFn::softplus},
                                              {"softsign", Op::Unary, UnaryFn::softsign},
                                              {"silu", Op::Unary, UnaryFn::silu},
                                              {"swish", Op::Unary, UnaryFn::silu},
                                              {"hard_sigmoid", Op::Unary, UnaryFn::hard_sigmoid},
                                              {"hard_silu", Op::Unary, UnaryFn::hard_swish},
                                              {"hard_swish", Op::Unary, UnaryFn::hard_swish},
                                              {"exponential", Op::Unary, UnaryFn::exp},
                                              {"mish", Op::Unary, UnaryFn::mish},
                                              {"log_softmax", Op::kCount},    // x - logsumexp(x) over the last axis
                                              {"log_sigmoid", Op::kCount}}};  // -softplus(-x)

const Entry* find(const std::string& name) {
  for (const Entry& e : kActivations)
    if (name == e.name) return &e;
  return nullptr;
}

std::string names() {
  std::string s;
  for (const Entry& e : kActivations) s += std::string(e.name) + ", ";
  return s + "linear";
}
}  // namespace

void check_activation(const std::string& activation) {
  if (activation.empty() || activation == "linear" || find(activation)) return;
  throw InvalidArgument("unknown activation '" + activation + "' (expected one of " + names() + ")");
}

int apply_activation(CallContext& ctx, const std::string& activation, int x, const std::string& owner) {
  if (activation.empty() || activation == "linear") return x;
  check_activation(activation);
  const Entry* e = find(activation);
  graph::OpBuilder b{ctx.g, nullptr, owner + "/" + activation};
  if (e->op == Op::Unary) return graph::ops::unary(b, e->fn, x);
  if (activation == "log_softmax") return graph::ops::log_softmax(b, x, -1);
  if (activation == "log_sigmoid")
    return graph::ops::unary(b, UnaryFn::negative,
                             graph::ops::unary(b, UnaryFn::softplus, graph::ops::unary(b, UnaryFn::negative, x)));
  graph::Attrs at;
  at.alpha = e->alpha;
  return ctx.g.add(e->op, {x}, at, owner + "/" + activation);
}

}  // namespace tk::nn
