// Adadelta (Keras 3): E[g^2] = rho E[g^2] + (1 - rho) g^2; d = -sqrt(E[d^2] + eps) g / sqrt(E[g^2] + eps);
// E[d^2] = rho E[d^2] + (1 - rho) d^2; w += lr * d.
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
  const float rho = in.hyper.at("rho"), eps = in.hyper.at("epsilon");
  auto rms = [&](int x) { return ops::unary(b, UnaryFn::sqrt, ops::add_scalar(b, x, eps)); };
  auto average = [&](int old, int x) {  // rho * old + (1 - rho) * x^2
    return ops::binary(b, BinaryFn::add, ops::mul_scalar(b, old, rho),
                       ops::mul_scalar(b, ops::unary(b, UnaryFn::square, x), 1.0f - rho));
  };
  const int acc_grad = average(in.slots[0], in.gradient);
  const int delta =
      ops::unary(b, UnaryFn::negative,
                 ops::binary(b, BinaryFn::divide, ops::binary(b, BinaryFn::multiply, rms(in.slots[1]), in.gradient),
                             rms(acc_grad)));
  const int acc_delta = average(in.slots[1], delta);
  return {ops::binary(b, BinaryFn::add, in.variable, ops::binary(b, BinaryFn::multiply, in.learning_rate, delta)),
          {acc_grad, acc_delta}};
}
}  // namespace

const OptimizerRule& adadelta_rule() {
  static const OptimizerRule rule{.keras_class = "Adadelta",
                                  .hyper = {{"rho", 0.95f}, {"epsilon", 1e-7f}},
                                  .learning_rate = 0.001f,
                                  .slots = {{"accumulated_grad"}, {"accumulated_delta_var"}},
                                  .update = update,
                                  .check = [](const Hypers& h) {
                                    if (!(h.at("rho") >= 0.0f && h.at("rho") <= 1.0f))
                                      throw InvalidArgument("Adadelta: rho must be in [0, 1]");
                                    if (!(h.at("epsilon") > 0.0f))
                                      throw InvalidArgument("Adadelta: epsilon must be > 0");
                                  }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Adadelta(AdadeltaOptions o) {
  return nn::make_rule_optimizer(nn::adadelta_rule(), {{"rho", o.rho}, {"epsilon", o.epsilon}}, o.learning_rate, o);
}

}  // namespace tk
