// SGD (Keras 3): w -= lr * g; with momentum m = momentum * m - lr * g, w += m (nesterov: w += momentum * m - lr * g).
// Runs as the fused SgdUpdate op (its math is the backends' shared math/optimizers.h).
#include "graph/op.h"
#include "nn/optimizer_rule.h"

namespace tk {
namespace nn {

const OptimizerRule& sgd_rule() {
  static const OptimizerRule rule{
      .keras_class = "SGD",
      .hyper = {{"momentum", 0.0f}, {"nesterov", 0.0f, true}},
      .learning_rate = 0.01f,
      // Keras makes the momentums only when momentum != 0, and so does trainkit (SgdUpdate then takes no slot).
      .slots = {{.name = "momentum", .in_keras = [](const Hypers& h) { return h.at("momentum") != 0.0f; }}},
      .fused = graph::Op::SgdUpdate,
      .configure =
          [](graph::UpdateConfig& c, const Hypers& h) {
            c.momentum = h.at("momentum");
            c.nesterov = h.at("nesterov") != 0.0f;
          },
      .check =
          [](const Hypers& h) {
            const float m = h.at("momentum");
            require(m >= 0.0f && m <= 1.0f, "SGD", "momentum", m, "in [0, 1]");
          }};
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::SGD(SGDOptions o) {
  return nn::make_rule_optimizer(nn::sgd_rule(), {{"momentum", o.momentum}, {"nesterov", o.nesterov ? 1.0f : 0.0f}},
                                 o.learning_rate, o);
}

}  // namespace tk
