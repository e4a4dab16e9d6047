// Keras' weight constraints (keras.constraints): after every optimizer step, each trainable weight with a constraint
// is replaced by the constraint of its new value, as Keras' optimizer does after apply_gradients.
//
//   auto dense = tk::layers::Dense(64, "relu");
//   dense->constraints["kernel"] = tk::constraints::MaxNorm(3.0f);        // Keras' kernel_constraint=MaxNorm(3)
//   dense->constraints["bias"] = tk::constraints::NonNeg();               // bias_constraint=NonNeg()
//   conv->constraints["kernel"] = tk::constraints::MaxNorm(2.0f, {0, 1, 2});  // one norm per filter
//
// The rules, with Keras' backend.epsilon() = 1e-7 and n = sqrt(sum(w^2)) over `axis` (one norm per index of the
// other axes): NonNeg w * (w >= 0); MaxNorm w * clip(n, 0, max_value) / (eps + n); UnitNorm w / (eps + n);
// MinMaxNorm w * (rate * clip(n, min_value, max_value) + (1 - rate) * n) / (eps + n). Constraints apply to
// trainable weights an optimizer updates (a frozen layer's weights stay as they are, as in Keras); they are read when
// the model is compiled. .keras files carry them as Keras' MaxNorm / NonNeg / UnitNorm / MinMaxNorm objects.
#pragma once
#include <string>
#include <vector>

namespace tk {

struct Constraint {
  enum class Kind { non_neg, max_norm, unit_norm, min_max_norm };
  Kind kind = Kind::non_neg;
  float min_value = 0.0f, max_value = 0.0f, rate = 1.0f;
  std::vector<int> axis;           // Keras' axis (an int or a list; negative counts from the end); NonNeg has none
  std::string class_name() const;  // Keras' class: "NonNeg", "MaxNorm", "UnitNorm", "MinMaxNorm"
};

namespace constraints {
// Keras' defaults. Bounds must be finite and >= 0, min_value <= max_value, rate in [0, 1] (InvalidArgument
// otherwise). An axis outside the weight's rank is an InvalidArgument naming the layer when the model is compiled.
Constraint NonNeg();
Constraint MaxNorm(float max_value = 2.0f, std::vector<int> axis = {0});
Constraint UnitNorm(std::vector<int> axis = {0});
Constraint MinMaxNorm(float min_value = 0.0f, float max_value = 1.0f, float rate = 1.0f, std::vector<int> axis = {0});
}  // namespace constraints

}  // namespace tk
