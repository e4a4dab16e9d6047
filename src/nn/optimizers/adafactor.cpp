// Adafactor (Keras 3, keras/src/optimizers/adafactor.py): second moments factored over the last two axes for
// variables of rank >= 2 (r: the mean over the last axis, shape var[:-1]; c: the mean over the second last, shape
// var[:-2] + var[-1:]), a full velocity v otherwise (r and c are then int32 scalar placeholders, as Keras makes them):
//   rho = min(lr, 1 / sqrt(t));  alpha = max(epsilon_2, rms(w)) * rho;  g2 = g^2 + epsilon_1;  b = 1 - t^beta_2_decay
//   rank >= 2: r = b r + (1 - b) mean(g2, -1);  c = b c + (1 - b) mean(g2, -2);  v = r / mean(r, -1) (x) c
//   else:      v = b v + (1 - b) g2
//   u = g / sqrt(v);  w -= alpha * u / max(1, rms(u) / clip_threshold)
// (relative_step's min(lr, 1 / sqrt(t)) is the same min again: it changes nothing.)
#include "graph/tensor_ops.h"
#include "nn/compiler/losses.h"
#include "nn/optimizer_rule.h"

namespace tk {
namespace nn {
namespace {
namespace ops = graph::ops;
using graph::BinaryFn;
using graph::ReduceFn;
using graph::UnaryFn;

Shape row_shape(const Shape& var) {  // r: var[:-1]
  if (var.rank() < 2) return Shape{};
  std::vector<int64_t> d;
  for (int i = 0; i + 1 < var.rank(); ++i) d.push_back(var[i]);
  return Shape(d);
}

Shape column_shape(const Shape& var) {  // c: var[:-2] + var[-1:]
  if (var.rank() < 2) return Shape{};
  std::vector<int64_t> d;
  for (int i = 0; i + 2 < var.rank(); ++i) d.push_back(var[i]);
  d.push_back(var[var.rank() - 1]);
  return Shape(d);
}

UpdateValues update(graph::OpBuilder& b, const UpdateOperands& in) {
  auto bin = [&](BinaryFn f, int x, int y) { return ops::binary(b, f, x, y); };
  auto mean = [&](int x, std::vector<int> axes, bool keep) { return ops::reduce(b, ReduceFn::mean, x, axes, keep); };
  auto rms = [&](int x) {  // sqrt(mean(x^2)) over every axis
    return ops::unary(b, UnaryFn::sqrt, reduce_all_axes(b, ReduceFn::mean, ops::unary(b, UnaryFn::square, x)));
  };
  const int rank = b.node(in.variable).shape.rank();
  const int g = in.gradient, t = in.step;
  const int rho =
      bin(BinaryFn::minimum, in.learning_rate, ops::unary(b, UnaryFn::reciprocal, ops::unary(b, UnaryFn::sqrt, t)));
  const int alpha = bin(BinaryFn::multiply,
                        bin(BinaryFn::maximum, ops::scalar(b, in.hyper.at("epsilon_2"), t), rms(in.variable)), rho);
  const int g2 = ops::add_scalar(b, ops::unary(b, UnaryFn::square, g), in.hyper.at("epsilon_1"));
  const int beta = bin(BinaryFn::subtract, ops::scalar(b, 1.0f, t),
                       bin(BinaryFn::power, t, ops::scalar(b, in.hyper.at("beta_2_decay"), t)));
  const int keep = bin(BinaryFn::subtract, ops::scalar(b, 1.0f, t), beta);
  auto average = [&](int old, int x) {  // beta * old + (1 - beta) * x
    return bin(BinaryFn::add, bin(BinaryFn::multiply, beta, old), bin(BinaryFn::multiply, keep, x));
  };
  int r = in.slots[0], c = in.slots[1], v;
  if (rank >= 2) {
    r = average(r, mean(g2, {rank - 1}, false));
    c = average(c, mean(g2, {rank - 2}, false));
    v = bin(BinaryFn::multiply, ops::expand_dims(b, bin(BinaryFn::divide, r, mean(r, {rank - 2}, true)), rank - 1),
            ops::expand_dims(b, c, rank - 2));
  } else {
    v = average(in.slots[2], g2);
  }
  const int u = bin(BinaryFn::divide, g, ops::unary(b, UnaryFn::sqrt, v));
  const int u_hat = bin(BinaryFn::divide, u,
                        bin(BinaryFn::maximum, ops::scalar(b, 1.0f, t),
                            bin(BinaryFn::divide, rms(u), ops::scalar(b, in.hyper.at("clip_threshold"), t))));
  return {bin(BinaryFn::subtract, in.variable, bin(BinaryFn::multiply, alpha, u_hat)), {r, c, v}};
}

DType placeholder_int32(const Shape& var) { return var.rank() < 2 ? DType::i32 : DType::f32; }
}  // namespace

const OptimizerRule& adafactor_rule() {
  static const OptimizerRule rule{
      .keras_class = "Adafactor",
      .hyper = {{"beta_2_decay", -0.8f},
                {"epsilon_1", 1e-30f},
                {"epsilon_2", 1e-3f},
                {"clip_threshold", 1.0f},
                {"relative_step", 1.0f, true}},
      .learning_rate = 0.001f,
      // Keras makes r, c, v variable by variable (one group).
      .slots = {{.name = "r", .shape = row_shape, .keras_dtype = placeholder_int32},
                {.name = "c", .shape = column_shape, .keras_dtype = placeholder_int32},
                {.name = "velocity"}},
      .update = update,
      .check = [](const Hypers& h) {
        require(h.at("beta_2_decay") <= 0.0f, "Adafactor", "beta_2_decay", h.at("beta_2_decay"), "<= 0");
        require(h.at("epsilon_1") >= 0.0f, "Adafactor", "epsilon_1", h.at("epsilon_1"), ">= 0");
        require(h.at("epsilon_2") >= 0.0f, "Adafactor", "epsilon_2", h.at("epsilon_2"), ">= 0");
        require(h.at("clip_threshold") > 0.0f, "Adafactor", "clip_threshold", h.at("clip_threshold"), "> 0");
      }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Adafactor(AdafactorOptions o) {
  return nn::make_rule_optimizer(nn::adafactor_rule(),
                                 {{"beta_2_decay", o.beta_2_decay},
                                  {"epsilon_1", o.epsilon_1},
                                  {"epsilon_2", o.epsilon_2},
                                  {"clip_threshold", o.clip_threshold},
                                  {"relative_step", o.relative_step ? 1.0f : 0.0f}},
                                 o.learning_rate, o);
}

}  // namespace tk
