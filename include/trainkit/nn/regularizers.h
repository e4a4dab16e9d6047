// Keras' weight and activity regularizers (keras.regularizers): penalties added to the loss of fit and evaluate.
//
//   auto dense = tk::layers::Dense(64, "relu");
//   dense->regularizers["kernel"] = tk::regularizers::L2(1e-4);   // Keras' kernel_regularizer=L2(1e-4)
//   dense->regularizers["bias"] = tk::regularizers::L1(1e-5);     // bias_regularizer=L1(1e-5)
//   dense->activity_regularizer = tk::regularizers::L1L2(0.0f, 1e-3f);  // on the output, divided by the batch size
//   auto reg = tk::layers::ActivityRegularization(0.0f, 0.01f);   // Keras' ActivityRegularization layer
//
// As in Keras 3, the loss fit minimizes and reports (and evaluate reports) is the compiled loss plus, for every
// trainable weight with a regularizer, r(weight), plus, for every layer output with an activity regularizer,
// r(output) / batch size; r(x) = l1 * sum(|x|) + l2 * sum(x^2). Frozen layers' weights add nothing (Keras sums
// trainable_weights only). .keras files carry them as Keras' L1 / L2 / L1L2 objects.
#pragma once
#include <string>

namespace tk {

struct Regularizer {
  enum class Kind { l1, l2, l1_l2 };
  Kind kind = Kind::l1_l2;  // Keras' class: L1, L2 or L1L2 (what a saved file names)
  float l1 = 0.0f;
  float l2 = 0.0f;
  std::string class_name() const { return kind == Kind::l1 ? "L1" : kind == Kind::l2 ? "L2" : "L1L2"; }
};

namespace regularizers {
// Keras' defaults. Each factor must be a finite number >= 0 (InvalidArgument otherwise, as Keras' ValueError).
Regularizer L1(float l1 = 0.01f);
Regularizer L2(float l2 = 0.01f);
Regularizer L1L2(float l1 = 0.0f, float l2 = 0.0f);
}  // namespace regularizers

}  // namespace tk
