// Adam and AdamW (Keras 3): m = beta_1 m + (1 - beta_1) g; v = beta_2 v + (1 - beta_2) g^2;
// w -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon). AdamW is Adam with Keras' default decoupled
// weight decay 0.004. Both run as the fused AdamUpdate op (its math is the backends' shared math/optimizers.h).
#include "graph/op.h"
#include "nn/optimizer_rule.h"

namespace tk {
namespace nn {
namespace {

OptimizerRule adam_like(const std::string& keras_class, float weight_decay) {
  return OptimizerRule{
      .keras_class = keras_class,
      .hyper = {{"beta_1", 0.9f}, {"beta_2", 0.999f}, {"epsilon", 1e-7f}, {"amsgrad", 0.0f, true, /*fixed=*/true}},
      .learning_rate = 0.001f,
      .weight_decay = weight_decay,
      .slots = {{"momentum"}, {"velocity"}},  // one add_optimizer_variables call: interleaved per variable
      .fused = graph::Op::AdamUpdate,
      .configure =
          [](graph::UpdateConfig& c, const Hypers& h) {
            c.beta_1 = h.at("beta_1");
            c.beta_2 = h.at("beta_2");
            c.epsilon = h.at("epsilon");
          },
      .check =
          [keras_class](const Hypers& h) {
            for (const char* k : {"beta_1", "beta_2"})
              require(h.at(k) >= 0.0f && h.at(k) < 1.0f, keras_class, k, h.at(k), "in [0, 1)");
            require(h.at("epsilon") > 0.0f, keras_class, "epsilon", h.at("epsilon"), "> 0");
          }};
}

Hypers hypers(const optimizers::AdamOptions& o) {
  return {{"beta_1", o.beta_1}, {"beta_2", o.beta_2}, {"epsilon", o.epsilon}};
}

}  // namespace

const OptimizerRule& adam_rule() {
  static const OptimizerRule rule = adam_like("Adam", 0.0f);
  return rule;
}

const OptimizerRule& adamw_rule() {
  static const OptimizerRule rule = adam_like("AdamW", 0.004f);
  return rule;
}
}  // namespace nn

OptimizerPtr optimizers::Adam(AdamOptions o) {
  return nn::make_rule_optimizer(nn::adam_rule(), nn::hypers(o), o.learning_rate, o);
}

OptimizerPtr optimizers::AdamW(AdamWOptions o) {
  return nn::make_rule_optimizer(nn::adamw_rule(), nn::hypers(o), o.learning_rate, o);
}

}  // namespace tk
