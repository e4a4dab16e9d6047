// How an epoch's value of a log is made from its per-batch values. Every log of a program is a float32 value the
// host reads after the step; most (the loss, accuracy, mae, top-k accuracy) are batch means, averaged over the epoch
// weighted by the batch's rows (Keras' Mean). Keras' stateful metrics (Precision, Recall, AUC, MeanIoU) are instead a
// vector of counts per batch (true/false positives at thresholds, a confusion matrix), summed over the epoch (and over
// data-parallel replicas), the metric computed from the sums when the logs are written (finish_log). A mean metric of
// an output carrying a Keras mask is [sum of the unmasked steps' values, their count] per batch (weighted_mean), summed
// the same way: Keras' Mean with the mask as sample weights.
//
//   Accumulator: sum[k] += stat.summed ? value : value * rows; value = finish_log(stat, sums of log k)
#pragma once
#include <cstdint>

namespace tk::nn {

struct LogStat {
  enum class Kind : uint8_t { mean, precision, recall, auc, mean_iou, weighted_mean };
  Kind kind = Kind::mean;
  int width = 1;  // float32 values per batch (mean: 1)
  // AUC: the counts are [tp(t), fp(t) for each of num_thresholds thresholds, positives, negatives].
  int num_thresholds = 0;
  bool pr_curve = false;
  uint8_t summation = 0;  // 0 interpolation, 1 minoring, 2 majoring
  int num_classes = 0;    // MeanIoU: the counts are the (num_classes, num_classes) confusion matrix, row = truth
  bool summed() const { return kind != Kind::mean; }
};

// The metric from its epoch sums (`width` values), as Keras' result() computes it (divide_no_nan: 0 for 0 / 0).
double finish_log(const LogStat& stat, const double* sums);

}  // namespace tk::nn
