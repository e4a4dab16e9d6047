// Keras 3's metrics in a program: the names Keras' compile accepts, and the log value each one emits (a batch mean,
// or for the stateful ones a vector of counts: nn/compiler/log_stats.h). Composed from the general ops
// (graph/tensor_ops.h), except the accuracies trainkit had first, which are fused ops.
//
//   auto [value, stat] = tk::nn::emit_metric(g, metric, loss, y_pred, y_true);
#pragma once
#include <string>
#include <utility>

#include "graph/graph.h"
#include "nn/compiler/log_stats.h"
#include "trainkit/nn/losses.h"
#include "trainkit/nn/metrics.h"

namespace tk::nn {

// What a metric is: its canonical snake_case kind ("precision", "auc", "top_k_categorical_accuracy", ...) from its
// class or name; InvalidArgument listing the known names otherwise.
std::string metric_kind(const Metric& m);
// Checks the kind and the options (k >= 1, MeanIoU's num_classes >= 2, thresholds in [0, 1], AUC's curve and
// summation_method, num_thresholds > 1); InvalidArgument naming the metric and the option.
void validate_metric(const Metric& m);
// The Keras class of a metric kind ("precision" -> "Precision"); empty for the accuracy names Keras writes as strings.
std::string metric_class(const std::string& kind);
// Emits the metric of predictions y_pred against targets y_true for an output compiled with `loss`: the log value
// (named `name`) and how it combines over an epoch.
std::pair<int, LogStat> emit_metric(graph::Graph& g, const Metric& m, const Loss& loss, int y_pred, int y_true,
                                    const std::string& name);
// The metric of an output carrying a Keras mask `mask` (float32 0/1, (batch, steps)), as Keras 3 computes it: a mean
// metric (accuracies, top-k, mae, mse: Keras' MeanMetricWrapper) takes the mask as sample weights, so its value is
// [sum over the unmasked steps, their count] summed over the epoch (LogStat weighted_mean); the stateful metrics
// (Precision, Recall, AUC, MeanIoU) do not read the mask in Keras and are emit_metric's.
std::pair<int, LogStat> emit_masked_metric(graph::Graph& g, const Metric& m, const Loss& loss, int y_pred, int y_true,
                                           int mask, const std::string& name);

}  // namespace tk::nn
