// RMSprop (Keras 3): velocity = rho velocity + (1 - rho) g^2 (centered: minus the square of the average gradient);
// with momentum m = momentum m + lr g / sqrt(velocity + epsilon), w -= m; else w -= lr g / sqrt(velocity + epsilon).
// Runs as the fused RmspropUpdate op (its math is the backends' shared math/optimizers.h).
#include "graph/op.h"
#include "nn/optimizer_rule.h"

namespace tk {
namespace nn {

const OptimizerRule& rmsprop_rule() {
  static const OptimizerRule rule{
      .keras_class = "RMSprop",
      .hyper = {{"rho", 0.9f}, {"momentum", 0.0f}, {"epsilon", 1e-7f}, {"centered", 0.0f, true}},
      .learning_rate = 0.001f,
      // Three add_optimizer_variables calls: every velocity, then every momentum (momentum > 0), then every average
      // gradient (centered). trainkit holds the same (RmspropUpdate takes only those: graph::update_slot_mask).
      .slots = {{.name = "velocity", .group = 0},
                {.name = "momentum", .group = 1, .in_keras = [](const Hypers& h) { return h.at("momentum") > 0.0f; }},
                {.name = "average_gradient",
                 .group = 2,
                 .in_keras = [](const Hypers& h) { return h.at("centered") != 0.0f; }}},
      .fused = graph::Op::RmspropUpdate,
      .configure =
          [](graph::UpdateConfig& c, const Hypers& h) {
            c.rho = h.at("rho");
            c.momentum = h.at("momentum");
            c.epsilon = h.at("epsilon");
            c.centered = h.at("centered") != 0.0f;
          },
      .check =
          [](const Hypers& h) {
            require(h.at("rho") >= 0.0f && h.at("rho") < 1.0f, "RMSprop", "rho", h.at("rho"), "in [0, 1)");
            require(h.at("momentum") >= 0.0f && h.at("momentum") <= 1.0f, "RMSprop", "momentum", h.at("momentum"),
                    "in [0, 1]");
            require(h.at("epsilon") > 0.0f, "RMSprop", "epsilon", h.at("epsilon"), "> 0");
          }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::RMSprop(RMSpropOptions o) {
  return nn::make_rule_optimizer(
      nn::rmsprop_rule(),
      {{"rho", o.rho}, {"momentum", o.momentum}, {"epsilon", o.epsilon}, {"centered", o.centered ? 1.0f : 0.0f}},
      o.learning_rate, o);
}

}  // namespace tk
