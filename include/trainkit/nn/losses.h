// Losses and metrics, named as in Keras 3.
//
//   model.compile(opt, "sparse_categorical_crossentropy", {"accuracy"});
//   model.compile(opt, tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
//   model.compile(opt, tk::losses::Huber({.delta = 2}), {"mae"});
//   model.compile(opt, tk::losses::CategoricalCrossentropy({.label_smoothing = 0.1f}), {"accuracy"});
#pragma once
#include <climits>
#include <optional>
#include <string>

namespace tk {

// A loss by name, as Keras' compile accepts it: the snake_case name or an alias (mean_squared_error/mse,
// mean_absolute_error/mae, huber, kl_divergence/kld, binary_crossentropy, binary_focal_crossentropy,
// categorical_crossentropy, sparse_categorical_crossentropy, mean_squared_logarithmic_error/msle, poisson,
// cosine_similarity, hinge, squared_hinge) or the class name (MeanAbsoluteError, Huber, ...), with the options of
// Keras' loss classes (each read only by the losses that have it). Reduction: Keras' sum_over_batch_size.
struct Loss {
  Loss(const char* loss_name) : name(loss_name) {}  // NOLINT: "mse" converts like in Keras
  Loss(std::string loss_name, bool logits = false) : name(std::move(loss_name)), from_logits(logits) {}  // NOLINT
  std::string name;
  bool from_logits = false;
  float label_smoothing = 0.0f;        // BinaryCrossentropy, CategoricalCrossentropy, BinaryFocalCrossentropy
  std::optional<int> ignore_class;     // SparseCategoricalCrossentropy: these positions are left out of the mean
  float delta = 1.0f;                  // Huber
  float gamma = 2.0f;                  // BinaryFocalCrossentropy
  float alpha = 0.25f;                 // BinaryFocalCrossentropy, with apply_class_balancing
  bool apply_class_balancing = false;  // BinaryFocalCrossentropy
};

namespace losses {
// No ignored class (Keras' ignore_class=None). (Options hold an int: a std::optional member would make every
// designated initializer that leaves it out a -Wmissing-field-initializers warning.)
inline constexpr int kNoClass = INT_MIN;
struct Options {
  bool from_logits = false;
  float label_smoothing = 0.0f;  // BinaryCrossentropy, CategoricalCrossentropy
  int ignore_class = kNoClass;   // SparseCategoricalCrossentropy
};
struct HuberOptions {
  float delta = 1.0f;
};
struct FocalOptions {
  bool apply_class_balancing = false;
  float alpha = 0.25f;
  float gamma = 2.0f;
  bool from_logits = false;
  float label_smoothing = 0.0f;
};
inline Loss MeanSquaredError() { return Loss("mean_squared_error"); }
inline Loss MeanAbsoluteError() { return Loss("mean_absolute_error"); }
inline Loss MeanSquaredLogarithmicError() { return Loss("mean_squared_logarithmic_error"); }
inline Loss KLDivergence() { return Loss("kl_divergence"); }
inline Loss Poisson() { return Loss("poisson"); }
inline Loss CosineSimilarity() { return Loss("cosine_similarity"); }
inline Loss Hinge() { return Loss("hinge"); }
inline Loss SquaredHinge() { return Loss("squared_hinge"); }
inline Loss Huber(HuberOptions o = {}) {
  Loss l("huber");
  l.delta = o.delta;
  return l;
}
inline Loss BinaryCrossentropy(Options o = {}) {
  Loss l("binary_crossentropy", o.from_logits);
  l.label_smoothing = o.label_smoothing;
  return l;
}
inline Loss CategoricalCrossentropy(Options o = {}) {
  Loss l("categorical_crossentropy", o.from_logits);
  l.label_smoothing = o.label_smoothing;
  return l;
}
inline Loss SparseCategoricalCrossentropy(Options o = {}) {
  Loss l("sparse_categorical_crossentropy", o.from_logits);
  if (o.ignore_class != kNoClass) l.ignore_class = o.ignore_class;
  return l;
}
inline Loss BinaryFocalCrossentropy(FocalOptions o = {}) {
  Loss l("binary_focal_crossentropy", o.from_logits);
  l.label_smoothing = o.label_smoothing;
  l.gamma = o.gamma;
  l.alpha = o.alpha;
  l.apply_class_balancing = o.apply_class_balancing;
  return l;
}
}  // namespace losses

}  // namespace tk
