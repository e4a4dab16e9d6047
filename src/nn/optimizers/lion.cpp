// Lion (Keras 3): w -= lr * sign(beta_1 m + (1 - beta_1) g); m = beta_2 m + (1 - beta_2) g.
#include "graph/tensor_ops.h"
#include "nn/optimizer_rule.h"
#include "trainkit/core/error.h"

namespace tk {
namespace nn {
namespace {
namespace ops = graph::ops;
using graph::BinaryFn;
using graph::UnaryFn;

UpdateValues update(graph::OpBuilder& b, const UpdateOperands& in) {
  const float b1 = in.hyper.at("beta_1"), b2 = in.hyper.at("beta_2");
  const int m = in.slots[0];
  const int direction =
      ops::unary(b, UnaryFn::sign,
                 ops::binary(b, BinaryFn::add, ops::mul_scalar(b, m, b1), ops::mul_scalar(b, in.gradient, 1.0f - b1)));
  const int w =
      ops::binary(b, BinaryFn::subtract, in.variable, ops::binary(b, BinaryFn::multiply, in.learning_rate, direction));
  return {w, {ops::binary(b, BinaryFn::add, ops::mul_scalar(b, m, b2), ops::mul_scalar(b, in.gradient, 1.0f - b2))}};
}
}  // namespace

const OptimizerRule& lion_rule() {
  static const OptimizerRule rule{.keras_class = "Lion",
                                  .hyper = {{"beta_1", 0.9f}, {"beta_2", 0.99f}},
                                  .learning_rate = 1e-4f,
                                  .slots = {{"momentum"}},
                                  .update = update,
                                  .check = [](const Hypers& h) {
                                    for (const char* k : {"beta_1", "beta_2"})
                                      if (!(h.at(k) >= 0.0f && h.at(k) <= 1.0f))
                                        throw InvalidArgument(std::string("Lion: ") + k + " must be in [0, 1]");
                                  }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Lion(LionOptions o) {
  return nn::make_rule_optimizer(nn::lion_rule(), {{"beta_1", o.beta_1}, {"beta_2", o.beta_2}}, o.learning_rate, o);
}

}  // namespace tk
