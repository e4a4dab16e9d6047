// Metrics, named as in Keras 3: a name as Keras' compile accepts it, or a metric object with its options.
//
//   model.compile(opt, "binary_crossentropy", {"accuracy", "precision", "recall", "auc"});
//   model.compile(opt, "sparse_categorical_crossentropy",
//                 {tk::metrics::SparseTopKCategoricalAccuracy({.k = 3}), tk::metrics::MeanIoU({.num_classes = 4})});
// Names: accuracy/acc, binary_accuracy, categorical_accuracy, sparse_categorical_accuracy, top_k_categorical_accuracy,
// sparse_top_k_categorical_accuracy, precision, recall, auc, mean_absolute_error/mae, mean_squared_error/mse, and the
// class names (Precision, AUC, MeanIoU, ...). The log name is the metric's name (Keras' default: "precision", "auc",
// "mean_io_u", "top_k_categorical_accuracy"; a string given to compile logs under that string, as in Keras).
// Precision, Recall, AUC and MeanIoU are stateful as in Keras: their epoch value comes from the counts of the whole
// epoch (true/false positives per threshold, the confusion matrix), not from a mean of batch values.
#pragma once
#include <climits>
#include <optional>
#include <string>

namespace tk {

struct Metric {
  Metric(const char* metric_name) : name(metric_name) {}             // NOLINT: "auc" converts like in Keras
  Metric(std::string metric_name) : name(std::move(metric_name)) {}  // NOLINT
  Metric(std::string log_name, std::string keras_class) : name(std::move(log_name)), cls(std::move(keras_class)) {}
  std::string name;           // the log name; also what the metric is, when cls is empty
  std::string cls;            // the Keras class ("Precision"), when the metric is an object with options
  int k = 5;                  // TopKCategoricalAccuracy, SparseTopKCategoricalAccuracy
  float threshold = 0.5f;     // Precision, Recall (Keras' thresholds: one value)
  int num_thresholds = 200;   // AUC
  std::string curve = "ROC";  // AUC: ROC or PR
  std::string summation_method = "interpolation";   // AUC: interpolation, minoring, majoring
  bool from_logits = false;                         // AUC
  int num_classes = 0;                              // MeanIoU (required)
  bool sparse_y_true = true, sparse_y_pred = true;  // MeanIoU: false: argmax over the last axis first
  std::optional<int> ignore_class;                  // MeanIoU
};

namespace metrics {
struct TopKOptions {
  int k = 5;
};
struct ThresholdOptions {
  float thresholds = 0.5f;
};
struct AucOptions {
  int num_thresholds = 200;
  std::string curve = "ROC";
  std::string summation_method = "interpolation";
  bool from_logits = false;
};
struct MeanIoUOptions {
  int num_classes = 0;
  bool sparse_y_true = true;
  bool sparse_y_pred = true;
  int ignore_class = INT_MIN;  // none (Keras' None); an int: see losses::kNoClass
};
inline Metric TopKCategoricalAccuracy(TopKOptions o = {}) {
  Metric m("top_k_categorical_accuracy", "TopKCategoricalAccuracy");
  m.k = o.k;
  return m;
}
inline Metric SparseTopKCategoricalAccuracy(TopKOptions o = {}) {
  Metric m("sparse_top_k_categorical_accuracy", "SparseTopKCategoricalAccuracy");
  m.k = o.k;
  return m;
}
inline Metric Precision(ThresholdOptions o = {}) {
  Metric m("precision", "Precision");
  m.threshold = o.thresholds;
  return m;
}
inline Metric Recall(ThresholdOptions o = {}) {
  Metric m("recall", "Recall");
  m.threshold = o.thresholds;
  return m;
}
inline Metric AUC(AucOptions o = {}) {
  Metric m("auc", "AUC");
  m.num_thresholds = o.num_thresholds;
  m.curve = o.curve;
  m.summation_method = o.summation_method;
  m.from_logits = o.from_logits;
  return m;
}
inline Metric MeanIoU(MeanIoUOptions o = {}) {
  Metric m("mean_io_u", "MeanIoU");
  m.num_classes = o.num_classes;
  m.sparse_y_true = o.sparse_y_true;
  m.sparse_y_pred = o.sparse_y_pred;
  if (o.ignore_class != INT_MIN) m.ignore_class = o.ignore_class;
  return m;
}
inline Metric MeanAbsoluteError() { return Metric("mean_absolute_error", "MeanAbsoluteError"); }
inline Metric MeanSquaredError() { return Metric("mean_squared_error", "MeanSquaredError"); }
}  // namespace metrics

}  // namespace tk
