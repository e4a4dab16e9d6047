// Adagrad (Keras 3): accumulator += g^2; w -= lr * g / sqrt(accumulator + epsilon).
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
  const int acc = ops::binary(b, BinaryFn::add, in.slots[0], ops::unary(b, UnaryFn::square, in.gradient));
  const int step = ops::binary(b, BinaryFn::divide, ops::binary(b, BinaryFn::multiply, in.learning_rate, in.gradient),
                               ops::unary(b, UnaryFn::sqrt, ops::add_scalar(b, acc, in.hyper.at("epsilon"))));
  return {ops::binary(b, BinaryFn::subtract, in.variable, step), {acc}};
}
}  // namespace

const OptimizerRule& adagrad_rule() {
  static const OptimizerRule rule{.keras_class = "Adagrad",
                                  .hyper = {{"initial_accumulator_value", 0.1f}, {"epsilon", 1e-7f}},
                                  .learning_rate = 0.001f,
                                  .slots = {{.name = "accumulator", .initial_from = "initial_accumulator_value"}},
                                  .update = update,
                                  .check = [](const Hypers& h) {
                                    if (!(h.at("initial_accumulator_value") >= 0.0f))
                                      throw InvalidArgument("Adagrad: initial_accumulator_value must be >= 0");
                                    if (!(h.at("epsilon") > 0.0f))
                                      throw InvalidArgument("Adagrad: epsilon must be > 0");
                                  }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Adagrad(AdagradOptions o) {
  return nn::make_rule_optimizer(nn::adagrad_rule(),
                                 {{"initial_accumulator_value", o.initial_accumulator_value}, {"epsilon", o.epsilon}},
                                 o.learning_rate, o);
}

}  // namespace tk
