#include "nn/compiler/metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "graph/tensor_ops.h"
#include "nn/compiler/losses.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/check_names.h"

namespace tk::nn {
using graph::BinaryFn;
using graph::Op;
using graph::ReduceFn;
using graph::UnaryFn;
namespace o = graph::ops;

namespace {

struct MetricName {
  const char* kind;
  const char* keras_class;
};
constexpr MetricName kMetrics[] = {{"binary_accuracy", "BinaryAccuracy"},
                                   {"categorical_accuracy", "CategoricalAccuracy"},
                                   {"sparse_categorical_accuracy", "SparseCategoricalAccuracy"},
                                   {"top_k_categorical_accuracy", "TopKCategoricalAccuracy"},
                                   {"sparse_top_k_categorical_accuracy", "SparseTopKCategoricalAccuracy"},
                                   {"precision", "Precision"},
                                   {"recall", "Recall"},
                                   {"auc", "AUC"},
                                   {"mean_io_u", "MeanIoU"},
                                   {"mean_absolute_error", "MeanAbsoluteError"},
                                   {"mean_squared_error", "MeanSquaredError"}};
struct Alias {
  const char* alias;
  const char* kind;
};
constexpr Alias kAliases[] = {{"accuracy", "accuracy"},       {"acc", "accuracy"},
                              {"mae", "mean_absolute_error"}, {"MAE", "mean_absolute_error"},
                              {"mse", "mean_squared_error"},  {"MSE", "mean_squared_error"}};

std::string known_metrics() {
  std::string s = "accuracy, acc";
  for (const MetricName& m : kMetrics) s += ", " + std::string(m.kind);
  return s + ", mae, mse, or a class name (Precision, AUC, MeanIoU, ...)";
}

int as_f32(graph::OpBuilder& b, int x) { return o::cast(b, x, DType::f32); }
int flatten(graph::OpBuilder& b, int x) { return o::reshape(b, x, Shape{b.node(x).shape.numel()}); }
// Keras' squeeze_or_expand_to_same_rank for (batch, 1) predictions against (batch,) targets.
int targets_like(graph::OpBuilder& b, int t, int p) {
  const Shape& ps = b.node(p).shape;
  if (b.node(t).shape.rank() == ps.rank() - 1 && ps[-1] == 1) t = o::expand_dims(b, t, -1);
  return t;
}
// 1 where x is nonzero (Keras casts y_true to bool).
int nonzero(graph::OpBuilder& b, int x) {
  x = as_f32(b, x);
  return as_f32(b, o::compare(b, BinaryFn::not_equal, x, o::scalar(b, 0.0f, x)));
}
// Class ids (batch, ...) as int32, of sparse targets ((batch, ..., 1) squeezed) or of an argmax over the last axis.
int class_ids(graph::OpBuilder& b, int x, bool sparse, const Shape& pred_shape) {
  if (!sparse) return o::arg_reduce(b, ReduceFn::max, x, -1, false);
  if (b.node(x).shape.rank() == pred_shape.rank() && b.node(x).shape[-1] == 1) x = o::squeeze(b, x, -1);
  return o::cast(b, x, DType::i32);
}

// Keras' in_top_k: the target's score has fewer than k scores strictly above it. Per position (batch, ...), 0 or 1.
int top_k(graph::OpBuilder& b, const Metric& m, int p, int t, bool sparse) {
  const Shape ps = b.node(p).shape;
  const int onehot = o::one_hot(b, class_ids(b, t, sparse, ps), ps[-1]);
  const int target_score = o::reduce(b, ReduceFn::sum, o::binary(b, BinaryFn::multiply, onehot, p), {-1}, true);
  const int above =
      o::reduce(b, ReduceFn::sum, as_f32(b, o::compare(b, BinaryFn::greater, p, target_score)), {-1}, false);
  return as_f32(b, o::compare(b, BinaryFn::less, above, o::scalar(b, float(m.k), above)));
}

// [true positives, false positives (precision) or false negatives (recall)] at the threshold (prediction > it).
int confusion_at_threshold(graph::OpBuilder& b, const Metric& m, int p, int t, bool precision) {
  t = targets_like(b, t, p);
  const int pos = as_f32(b, o::compare(b, BinaryFn::greater, p, o::scalar(b, m.threshold, p)));
  const int truth = nonzero(b, t);
  const int tp = reduce_all_axes(b, ReduceFn::sum, o::binary(b, BinaryFn::multiply, pos, truth));
  const int other = o::binary(b, BinaryFn::subtract, reduce_all_axes(b, ReduceFn::sum, precision ? pos : truth), tp);
  return o::stack(b, {tp, other}, 0);  // (2)
}

// AUC's counts as Keras' evenly-spaced-thresholds path makes them: each prediction (clipped to [0, 1]) falls in
// bucket max(ceil(p (n - 1)) - 1, 0); the histograms of the positives and of the negatives per bucket, then the totals:
// [pos_hist (n), neg_hist (n), positives, negatives]. tp at threshold i is the positives in buckets >= i (finish_log).
int auc_counts(graph::OpBuilder& b, const Metric& m, int p, int t) {
  t = targets_like(b, t, p);
  if (m.from_logits) p = o::unary(b, UnaryFn::sigmoid, p);
  p = flatten(b, o::unary(b, UnaryFn::clip, p, 0.0f, 1.0f));
  const int truth = flatten(b, nonzero(b, t));
  const int x = o::mul_scalar(b, p, float(m.num_thresholds - 1));
  const int floor = as_f32(b, o::cast(b, x, DType::i32));  // x >= 0: truncation is floor
  const int whole = as_f32(b, o::compare(b, BinaryFn::equal, x, floor));
  const int bucket = o::binary(b, BinaryFn::maximum, o::binary(b, BinaryFn::subtract, floor, whole),
                               o::scalar(b, 0.0f, floor));                             // ceil(x) - 1, at least 0
  const int onehot = o::one_hot(b, o::cast(b, bucket, DType::i32), m.num_thresholds);  // (N, n); NaN: no bucket
  const int falsy = o::add_scalar(b, o::mul_scalar(b, truth, -1.0f), 1.0f);
  auto hist = [&](int labels) {
    return o::reduce(b, ReduceFn::sum, o::binary(b, BinaryFn::multiply, onehot, o::expand_dims(b, labels, -1)), {0},
                     false);
  };
  const int totals =
      o::stack(b, {reduce_all_axes(b, ReduceFn::sum, truth), reduce_all_axes(b, ReduceFn::sum, falsy)}, 0);
  return o::concat(b, {hist(truth), hist(falsy), totals}, 0);  // (2 n + 2)
}

// MeanIoU's confusion matrix (num_classes, num_classes), rows the truth, flattened. Ids outside [0, num_classes) and
// ignore_class positions are left out (their one-hot rows are zero).
int iou_counts(graph::OpBuilder& b, const Metric& m, int p, int t) {
  const Shape ps = b.node(p).shape;
  int truth = flatten(b, class_ids(b, t, m.sparse_y_true, ps));
  const int pred = flatten(b, m.sparse_y_pred ? o::cast(b, p, DType::i32) : class_ids(b, p, false, ps));
  int oh_true = o::one_hot(b, truth, m.num_classes);  // (N, C)
  if (m.ignore_class) {
    const int tf = as_f32(b, truth);
    const int keep = as_f32(b, o::compare(b, BinaryFn::not_equal, tf, o::scalar(b, float(*m.ignore_class), tf)));
    oh_true = o::binary(b, BinaryFn::multiply, oh_true, o::expand_dims(b, keep, -1));
  }
  const int oh_pred = o::one_hot(b, pred, m.num_classes);
  if (b.node(oh_true).shape[0] != b.node(oh_pred).shape[0])
    throw InvalidArgument("MeanIoU: " + std::to_string(b.node(oh_true).shape[0]) + " targets for " +
                          std::to_string(b.node(oh_pred).shape[0]) +
                          " predictions (probabilities need sparse_y_pred=False: tk::metrics::MeanIoU({.num_classes = "
                          "N, .sparse_y_pred = false}))");
  const int cm = o::batch_matmul(b, oh_true, oh_pred, true, false);
  return o::reshape(b, cm, Shape{int64_t(m.num_classes) * m.num_classes});
}

// What "accuracy" means for an output compiled with loss `l` (Keras: binary when the loss is binary or the output has
// one unit; sparse when the loss is sparse).
std::string resolved_kind(const Metric& m, const std::string& l, const Shape& out) {
  const std::string kind = metric_kind(m);
  if (kind != "accuracy") return kind;
  if (l == "binary_crossentropy" || l == "binary_focal_crossentropy" || (out.rank() >= 1 && out[-1] == 1))
    return "binary_accuracy";
  if (l == "sparse_categorical_crossentropy") return "sparse_categorical_accuracy";
  return "categorical_accuracy";
}

// A mean metric's values per position (batch, ...) before Keras' Mean averages them (MeanMetricWrapper's fn): the
// last axis of the predictions reduced as the metric function does.
int position_values(graph::OpBuilder& b, const std::string& kind, const Metric& m, int p, int t) {
  const Shape ps = b.node(p).shape;
  if (kind == "top_k_categorical_accuracy") return top_k(b, m, p, t, false);
  if (kind == "sparse_top_k_categorical_accuracy") return top_k(b, m, p, t, true);
  if (kind == "mean_absolute_error" || kind == "mean_squared_error") {
    const int d = o::binary(b, BinaryFn::subtract, p, as_f32(b, targets_like(b, t, p)));
    return o::reduce(b, ReduceFn::mean, o::unary(b, kind == "mean_absolute_error" ? UnaryFn::abs : UnaryFn::square, d),
                     {-1}, false);
  }
  if (kind == "binary_accuracy") {  // mean over the last axis of (p > 0.5) == t
    const int pos = as_f32(b, o::compare(b, BinaryFn::greater, p, o::scalar(b, 0.5f, p)));
    const int tf = as_f32(b, targets_like(b, t, p));
    return o::reduce(b, ReduceFn::mean, as_f32(b, o::compare(b, BinaryFn::equal, tf, pos)), {-1}, false);
  }
  if (kind == "categorical_accuracy" || kind == "sparse_categorical_accuracy") {  // argmax(p) == the target class
    const int predicted = o::arg_reduce(b, ReduceFn::max, p, -1, false);
    const int truth = class_ids(b, t, kind == "sparse_categorical_accuracy", ps);
    return as_f32(b, o::compare(b, BinaryFn::equal, as_f32(b, predicted), as_f32(b, truth)));
  }
  return -1;  // not a mean metric
}

double divide_no_nan(double a, double b) { return b == 0.0 ? 0.0 : a / b; }

double finish_auc(const LogStat& s, const double* v) {
  const int n = s.num_thresholds;
  std::vector<double> tp(n), fp(n);
  double tp_acc = 0, fp_acc = 0;
  for (int i = n - 1; i >= 0; --i) {  // reversed cumulative sums: predictions above threshold i
    tp_acc += v[i];
    fp_acc += v[n + i];
    tp[i] = tp_acc;
    fp[i] = fp_acc;
  }
  const double positives = v[2 * n], negatives = v[2 * n + 1];
  auto fn = [&](int i) { return positives - tp[i]; };
  auto tn = [&](int i) { return negatives - fp[i]; };
  double auc = 0.0;
  if (s.pr_curve && s.summation == 0) {  // Keras' interpolate_pr_auc (Davis & Goadrich)
    for (int i = 0; i + 1 < n; ++i) {
      const double dtp = tp[i] - tp[i + 1];
      const double p0 = tp[i] + fp[i], p1 = tp[i + 1] + fp[i + 1];
      const double slope = divide_no_nan(dtp, std::max(p0 - p1, 0.0));
      const double intercept = tp[i + 1] - slope * p1;
      const double ratio = p0 > 0 && p1 > 0 ? divide_no_nan(p0, std::max(p1, 0.0)) : 1.0;
      auc += divide_no_nan(slope * (dtp + intercept * std::log(ratio)), std::max(tp[i + 1] + fn(i + 1), 0.0));
    }
    return auc;
  }
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    const double recall = divide_no_nan(tp[i], tp[i] + fn(i));
    if (s.pr_curve) {
      x[i] = recall;
      y[i] = divide_no_nan(tp[i], tp[i] + fp[i]);
    } else {
      x[i] = divide_no_nan(fp[i], fp[i] + tn(i));
      y[i] = recall;
    }
  }
  for (int i = 0; i + 1 < n; ++i) {
    const double h = s.summation == 0   ? (y[i] + y[i + 1]) / 2.0
                     : s.summation == 1 ? std::min(y[i], y[i + 1])
                                        : std::max(y[i], y[i + 1]);
    auc += (x[i] - x[i + 1]) * h;
  }
  return auc;
}

double finish_iou(const LogStat& s, const double* cm) {
  const int c = s.num_classes;
  double sum = 0.0;
  int valid = 0;
  for (int k = 0; k < c; ++k) {
    double row = 0.0, col = 0.0;
    for (int j = 0; j < c; ++j) {
      row += cm[k * c + j];
      col += cm[j * c + k];
    }
    const double denominator = row + col - cm[k * c + k];
    if (denominator != 0.0) ++valid;
    sum += divide_no_nan(cm[k * c + k], denominator);
  }
  return divide_no_nan(sum, valid);
}

}  // namespace

std::string metric_kind(const Metric& m) {
  const std::string& key = m.cls.empty() ? m.name : m.cls;
  for (const MetricName& n : kMetrics)
    if (key == n.kind || key == n.keras_class) return n.kind;
  for (const Alias& a : kAliases)
    if (key == a.alias) return a.kind;
  throw InvalidArgument("unknown metric '" + key + "' (expected one of " + known_metrics() + ")");
}

std::string metric_class(const std::string& kind) {
  const auto* n = std::ranges::find(kMetrics, kind, &MetricName::kind);
  return n == std::end(kMetrics) ? "" : n->keras_class;
}

void validate_metric(const Metric& m) {
  const std::string kind = metric_kind(m);
  auto bad = [&](const std::string& what) { throw InvalidArgument("metric '" + m.name + "': " + what); };
  if (kind == "top_k_categorical_accuracy" || kind == "sparse_top_k_categorical_accuracy")
    if (m.k < 1) bad("k must be >= 1, got " + std::to_string(m.k));
  if ((kind == "precision" || kind == "recall") && !(m.threshold >= 0.0f && m.threshold <= 1.0f))
    bad("thresholds must be in [0, 1], got " + std::to_string(m.threshold));
  if (kind == "auc") {
    if (m.num_thresholds <= 1) bad("num_thresholds must be > 1, got " + std::to_string(m.num_thresholds));
    if (m.curve != "ROC" && m.curve != "PR") bad("curve must be ROC or PR, got '" + m.curve + "'");
    if (m.summation_method != "interpolation" && m.summation_method != "minoring" && m.summation_method != "majoring")
      bad("summation_method must be interpolation, minoring or majoring, got '" + m.summation_method + "'");
  }
  if (kind == "mean_io_u" && m.num_classes < 2)
    bad("MeanIoU needs num_classes (>= 2), got " + std::to_string(m.num_classes) +
        " (use tk::metrics::MeanIoU({.num_classes = N}), or a MeanIoU object in compile_config)");
}

std::pair<int, LogStat> emit_metric(graph::Graph& g, const Metric& m, const Loss& loss, int p, int t,
                                    const std::string& name) {
  validate_metric(m);
  const std::string kind = resolved_kind(m, canonical_loss_name(loss.name), g[p].shape);
  if (kind == "binary_accuracy") return {g.add(Op::BinaryAccuracy, {p, t}, {}, name), {}};
  if (kind == "categorical_accuracy") return {g.add(Op::CategoricalAccuracy, {p, t}, {}, name), {}};
  if (kind == "sparse_categorical_accuracy") return {g.add(Op::SparseCategoricalAccuracy, {p, t}, {}, name), {}};
  graph::OpBuilder b{g, nullptr, name};
  auto named = [&](int id) {
    g[id].name = name;
    return id;
  };
  // The other mean metrics (top-k, errors); the stateful ones below add no node here.
  if (const int per = position_values(b, kind, m, p, t); per >= 0)
    return {named(reduce_all_axes(b, ReduceFn::mean, per)), {}};
  if (kind == "precision" || kind == "recall")
    return {named(confusion_at_threshold(b, m, p, t, kind == "precision")),
            {.kind = kind == "precision" ? LogStat::Kind::precision : LogStat::Kind::recall, .width = 2}};
  if (kind == "auc") {
    const uint8_t summation = m.summation_method == "interpolation" ? 0 : m.summation_method == "minoring" ? 1 : 2;
    return {named(auc_counts(b, m, p, t)),
            {.kind = LogStat::Kind::auc,
             .width = 2 * m.num_thresholds + 2,
             .num_thresholds = m.num_thresholds,
             .pr_curve = m.curve == "PR",
             .summation = summation}};
  }
  if (kind == "mean_io_u")
    return {named(iou_counts(b, m, p, t)),
            {.kind = LogStat::Kind::mean_iou, .width = m.num_classes * m.num_classes, .num_classes = m.num_classes}};
  throw InvalidArgument("metric '" + m.name + "' has no implementation");  // every kind is handled above
}

std::pair<int, LogStat> emit_masked_metric(graph::Graph& g, const Metric& m, const Loss& loss, int p, int t, int mask,
                                           const std::string& name) {
  validate_metric(m);
  const std::string kind = resolved_kind(m, canonical_loss_name(loss.name), g[p].shape);
  graph::OpBuilder b{g, nullptr, name};
  const int per = position_values(b, kind, m, p, t);
  if (per < 0) return emit_metric(g, m, loss, p, t, name);  // Keras' stateful metrics do not read the mask
  if (g[per].shape != g[mask].shape)
    throw Unsupported("metric '" + m.name + "' over an output carrying a Keras mask: its per-step values " +
                      g[per].shape.to_string() + " do not have the mask's shape " + g[mask].shape.to_string());
  const int w = as_f32(b, mask);
  const int weighted = reduce_all_axes(b, ReduceFn::sum, o::binary(b, BinaryFn::multiply, per, w));
  const int out = o::stack(b, {weighted, reduce_all_axes(b, ReduceFn::sum, w)}, 0);  // (2): [sum(v m), sum(m)]
  g[out].name = name;
  return {out, {.kind = LogStat::Kind::weighted_mean, .width = 2}};
}

double finish_log(const LogStat& s, const double* v) {
  switch (s.kind) {
    case LogStat::Kind::mean:
      return v[0];
    case LogStat::Kind::weighted_mean:
      return divide_no_nan(v[0], v[1]);
    case LogStat::Kind::precision:  // [tp, fp]
    case LogStat::Kind::recall:     // [tp, fn]
      return divide_no_nan(v[0], v[0] + v[1]);
    case LogStat::Kind::auc:
      return finish_auc(s, v);
    case LogStat::Kind::mean_iou:
      return finish_iou(s, v);
  }
  return 0.0;
}

}  // namespace tk::nn

namespace tk::metrics {
void check(const Metric& metric) { nn::validate_metric(metric); }
}  // namespace tk::metrics
