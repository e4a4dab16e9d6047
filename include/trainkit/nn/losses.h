// Losses and metrics, named as in Keras 3.
//
//   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});
//   model.compile(opt, tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
#pragma once
#include <string>

namespace tk {

// A loss by name (mean_squared_error/mse, binary_crossentropy, categorical_crossentropy,
// sparse_categorical_crossentropy) and whether predictions are logits.
struct Loss {
  Loss(const char* loss_name) : name(loss_name) {}  // NOLINT: "mse" converts like in Keras
  Loss(std::string loss_name, bool logits = false) : name(std::move(loss_name)), from_logits(logits) {}  // NOLINT
  std::string name;
  bool from_logits = false;
};

namespace losses {
struct Options {
  bool from_logits = false;
};
inline Loss MeanSquaredError() { return Loss("mean_squared_error"); }
inline Loss BinaryCrossentropy(Options o = {}) { return Loss("binary_crossentropy", o.from_logits); }
inline Loss CategoricalCrossentropy(Options o = {}) { return Loss("categorical_crossentropy", o.from_logits); }
inline Loss SparseCategoricalCrossentropy(Options o = {}) {
  return Loss("sparse_categorical_crossentropy", o.from_logits);
}
}  // namespace losses

}  // namespace tk
