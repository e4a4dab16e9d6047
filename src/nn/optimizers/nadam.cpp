// Nadam (Keras 3): Adam with Nesterov momentum and Dozat's momentum schedule u_t = beta_1 (1 - 0.5 * 0.96^t).
// The optimizer-level variable u_product (Keras' _u_product: the product of u_1 .. u_t) is advanced once per step,
// before the variables' updates, which read its new value:
//   m = m + (g - m)(1 - beta_1);  v = v + (g^2 - v)(1 - beta_2)
//   m_hat = u_{t+1} m / (1 - u_product u_{t+1}) + (1 - u_t) g / (1 - u_product);  v_hat = v / (1 - beta_2^t)
//   w -= lr m_hat / (sqrt(v_hat) + epsilon)
#include "graph/tensor_ops.h"
#include "nn/optimizer_rule.h"

namespace tk {
namespace nn {
namespace {
namespace ops = graph::ops;
using graph::BinaryFn;
using graph::UnaryFn;

int one_minus(graph::OpBuilder& b, int x) { return ops::add_scalar(b, ops::mul_scalar(b, x, -1.0f), 1.0f); }

// u_t = beta_1 (1 - 0.5 * 0.96^t) for the float32 scalar t.
int momentum_schedule(graph::OpBuilder& b, int t, float beta_1) {
  const int decay = ops::binary(b, BinaryFn::power, ops::scalar(b, 0.96f, t), t);
  return ops::mul_scalar(b, ops::add_scalar(b, ops::mul_scalar(b, decay, -0.5f), 1.0f), beta_1);
}

int next_u_product(graph::OpBuilder& b, int old, int step, const Hypers& h) {
  return ops::binary(b, BinaryFn::multiply, old, momentum_schedule(b, step, h.at("beta_1")));
}

UpdateValues update(graph::OpBuilder& b, const UpdateOperands& in) {
  const float b1 = in.hyper.at("beta_1"), b2 = in.hyper.at("beta_2"), eps = in.hyper.at("epsilon");
  auto mul = [&](int x, int y) { return ops::binary(b, BinaryFn::multiply, x, y); };
  auto div = [&](int x, int y) { return ops::binary(b, BinaryFn::divide, x, y); };
  auto add = [&](int x, int y) { return ops::binary(b, BinaryFn::add, x, y); };
  auto sub = [&](int x, int y) { return ops::binary(b, BinaryFn::subtract, x, y); };
  const int g = in.gradient;
  const int u_t = momentum_schedule(b, in.step, b1);
  const int u_t_1 = momentum_schedule(b, ops::add_scalar(b, in.step, 1.0f), b1);
  const int u_product_t = in.optimizer_variables[0];
  const int u_product_t_1 = mul(u_product_t, u_t_1);
  const int beta_2_power = ops::binary(b, BinaryFn::power, ops::scalar(b, b2, in.step), in.step);
  const int m = add(in.slots[0], ops::mul_scalar(b, sub(g, in.slots[0]), 1.0f - b1));
  const int v = add(in.slots[1], ops::mul_scalar(b, sub(ops::unary(b, UnaryFn::square, g), in.slots[1]), 1.0f - b2));
  const int m_hat =
      add(div(mul(u_t_1, m), one_minus(b, u_product_t_1)), div(mul(one_minus(b, u_t), g), one_minus(b, u_product_t)));
  const int v_hat = div(v, one_minus(b, beta_2_power));
  const int step = div(mul(m_hat, in.learning_rate), ops::add_scalar(b, ops::unary(b, UnaryFn::sqrt, v_hat), eps));
  return {sub(in.variable, step), {m, v}};
}
}  // namespace

const OptimizerRule& nadam_rule() {
  static const OptimizerRule rule{
      .keras_class = "Nadam",
      .hyper = {{"beta_1", 0.9f}, {"beta_2", 0.999f}, {"epsilon", 1e-7f}},
      .learning_rate = 0.001f,
      .slots = {{"momentum"}, {"velocity"}},  // one add_optimizer_variables call: interleaved per variable
      .variables = {{.name = "u_product", .initial = 1.0f, .next = next_u_product}},
      .update = update,
      .check = [](const Hypers& h) {
        for (const char* k : {"beta_1", "beta_2"})
          require(h.at(k) >= 0.0f && h.at(k) < 1.0f, "Nadam", k, h.at(k), "in [0, 1)");
        require(h.at("epsilon") > 0.0f, "Nadam", "epsilon", h.at("epsilon"), "> 0");
      }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Nadam(NadamOptions o) {
  return nn::make_rule_optimizer(nn::nadam_rule(), {{"beta_1", o.beta_1}, {"beta_2", o.beta_2}, {"epsilon", o.epsilon}},
                                 o.learning_rate, o);
}

}  // namespace tk
