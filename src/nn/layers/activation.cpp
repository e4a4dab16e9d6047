#include <array>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"

namespace tk::nn {
namespace {
using graph::Op;
struct Entry {
  const char* name;
  Op op;
  float alpha;
};
// Keras 3 defaults: elu alpha 1.0, leaky_relu negative_slope 0.2, gelu exact (approximate=False).
constexpr std::array<Entry, 7> kActivations{{{"relu", Op::Relu, 0.0f},
                                             {"sigmoid", Op::Sigmoid, 0.0f},
                                             {"tanh", Op::Tanh, 0.0f},
                                             {"softmax", Op::Softmax, 0.0f},
                                             {"gelu", Op::Gelu, 0.0f},
                                             {"elu", Op::Elu, 1.0f},
                                             {"leaky_relu", Op::LeakyRelu, 0.2f}}};

const Entry* find(const std::string& name) {
  for (const Entry& e : kActivations)
    if (name == e.name) return &e;
  return nullptr;
}
}  // namespace

void check_activation(const std::string& activation) {
  if (activation.empty() || activation == "linear" || find(activation)) return;
  throw InvalidArgument("unknown activation '" + activation +
                        "' (expected one of relu, sigmoid, tanh, softmax, gelu, elu, leaky_relu, linear)");
}

int apply_activation(CallContext& ctx, const std::string& activation, int x, const std::string& owner) {
  if (activation.empty() || activation == "linear") return x;
  check_activation(activation);
  const Entry* e = find(activation);
  graph::Attrs at;
  at.alpha = e->alpha;
  return ctx.g.add(e->op, {x}, at, owner + "/" + activation);
}

}  // namespace tk::nn
