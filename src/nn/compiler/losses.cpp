#include "nn/compiler/losses.h"

#include <cctype>
#include <cmath>
#include <cstring>

#include "graph/tensor_ops.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/check_names.h"

namespace tk::nn {
using graph::BinaryFn;
using graph::Op;
using graph::ReduceFn;
using graph::UnaryFn;
namespace o = graph::ops;

namespace {

constexpr float kEpsilon = 1e-7f;  // Keras' backend.epsilon()

struct Alias {
  const char* alias;
  const char* name;
};
// Keras' losses.get names besides the snake_case ones and the class names (keras.src.losses.ALL_OBJECTS_DICT).
constexpr Alias kAliases[] = {{"mse", "mean_squared_error"},
                              {"MSE", "mean_squared_error"},
                              {"mae", "mean_absolute_error"},
                              {"MAE", "mean_absolute_error"},
                              {"msle", "mean_squared_logarithmic_error"},
                              {"MSLE", "mean_squared_logarithmic_error"},
                              {"kld", "kl_divergence"},
                              {"KLD", "kl_divergence"},
                              {"bce", "binary_crossentropy"},
                              {"BCE", "binary_crossentropy"}};

std::string known_names() {
  std::string s;
  for (const LossClass& c : loss_classes()) s += (s.empty() ? "" : ", ") + std::string(c.name);
  for (const Alias& a : kAliases)  // the lowercase spellings (mse, mae, ...); MSE, MAE, ... are the same
    if (std::islower(static_cast<unsigned char>(a.alias[0]))) s += ", " + std::string(a.alias);
  return s + ", or a class name (" + loss_classes()[0].keras_class + ", ...)";
}

}  // namespace

int reduce_all_axes(graph::OpBuilder& b, ReduceFn f, int x) {
  std::vector<int> axes;
  for (int i = 0; i < b.node(x).shape.rank(); ++i) axes.push_back(i);
  return o::reduce(b, f, x, axes, false);
}

namespace {

int all_axes_mean(graph::OpBuilder& b, int x) { return reduce_all_axes(b, ReduceFn::mean, x); }
int all_axes_sum(graph::OpBuilder& b, int x) { return reduce_all_axes(b, ReduceFn::sum, x); }
int sub(graph::OpBuilder& b, int x, int y) { return o::binary(b, BinaryFn::subtract, x, y); }
int mul(graph::OpBuilder& b, int x, int y) { return o::binary(b, BinaryFn::multiply, x, y); }
int one_minus(graph::OpBuilder& b, int x) { return o::add_scalar(b, o::mul_scalar(b, x, -1.0f), 1.0f); }
int log_of(graph::OpBuilder& b, int x) { return o::unary(b, UnaryFn::log, x); }

// Keras' label smoothing: t (1 - s) + s / classes (2 for the binary losses).
int smooth_labels(graph::OpBuilder& b, int t, float s, float classes) {
  return s == 0.0f ? t : o::add_scalar(b, o::mul_scalar(b, t, 1.0f - s), s / classes);
}

// Keras' hinge labels: {0, 1} targets become {-1, 1}, when every target of the batch is 0 or 1 (a data-dependent
// choice in Keras: ops.cond over the whole batch), others are used as they are.
int hinge_labels(graph::OpBuilder& b, int t) {
  const int is0 = o::cast(b, o::compare(b, BinaryFn::equal, t, o::scalar(b, 0.0f, t)), DType::f32);
  const int is1 = o::cast(b, o::compare(b, BinaryFn::equal, t, o::scalar(b, 1.0f, t)), DType::f32);
  const int binary = reduce_all_axes(b, ReduceFn::min, o::binary(b, BinaryFn::maximum, is0, is1));  // 1 or 0
  const int converted = o::add_scalar(b, o::mul_scalar(b, t, 2.0f), -1.0f);
  return o::binary(b, BinaryFn::add, mul(b, binary, converted), mul(b, one_minus(b, binary), t));
}

// Keras' ops.normalize(x, axis=-1): x * min(rsqrt(sum(x^2)), 1 / eps).
int l2_normalize(graph::OpBuilder& b, int x) {
  const int ss = o::reduce(b, ReduceFn::sum, o::unary(b, UnaryFn::square, x), {-1}, true);
  const int inv = o::binary(b, BinaryFn::minimum, o::unary(b, UnaryFn::rsqrt, ss), o::scalar(b, 1.0f / kEpsilon, ss));
  return mul(b, x, inv);
}

// Keras' categorical_crossentropy per position: -sum(t log q) over the class axis, q the normalized and clipped
// probabilities (or log_softmax of logits).
int cce_positions(graph::OpBuilder& b, const Loss& loss, int p, int t) {
  t = smooth_labels(b, t, loss.label_smoothing, float(b.node(p).shape[-1]));
  int logp;
  if (loss.from_logits) {
    logp = o::log_softmax(b, p, -1);
  } else {
    const int q = o::binary(b, BinaryFn::divide, p, o::reduce(b, ReduceFn::sum, p, {-1}, true));
    logp = log_of(b, o::unary(b, UnaryFn::clip, q, kEpsilon, 1.0f - kEpsilon));
  }
  return o::mul_scalar(b, o::reduce(b, ReduceFn::sum, mul(b, t, logp), {-1}, false), -1.0f);
}

// Keras' sparse_categorical_crossentropy per position (batch, ...) of probabilities or logits (batch, ..., classes).
// With ignore_class c (`valid` != null), as Keras computes it: positions whose target is c get no loss (0) and are
// left out of the mean (*valid: 1 where counted), and their predictions are replaced before the crossentropy (so a
// NaN there does not reach the loss).
int sparse_cce_positions(graph::OpBuilder& b, const Loss& loss, int p, int t, int* valid) {
  const Shape ps = b.node(p).shape;                                   // (batch, ..., classes)
  if (b.node(t).shape.rank() == ps.rank()) t = o::squeeze(b, t, -1);  // (batch, ..., 1) targets
  int counted = -1;                                                   // bool (batch, ...)
  if (loss.ignore_class) {
    const int tf = o::cast(b, t, DType::f32);
    counted = o::compare(b, BinaryFn::not_equal, tf, o::scalar(b, float(*loss.ignore_class), tf));
    const int counted_p = o::broadcast_to(b, o::expand_dims(b, counted, -1), ps);
    // Keras replaces them by 0; from probabilities trainkit uses 1 (the same masked result, without 0 / 0 in the
    // normalization whose NaN would reach the gradient as 0 * NaN).
    p = o::where(b, counted_p, p, o::scalar(b, loss.from_logits ? 0.0f : 1.0f, p));
  }
  // The categorical one of one-hot targets (validate_loss: no label smoothing); an id outside [0, classes) is a zero
  // row.
  const int per = cce_positions(b, loss, p, o::one_hot(b, t, ps[-1]));
  if (counted < 0) return per;
  *valid = o::cast(b, counted, DType::f32);
  return o::where(b, counted, per, o::scalar(b, 0.0f, per));
}

// Keras' binary_crossentropy per element (the mean over the last axis is the caller's): from logits
// -(t log_sigmoid(x) + (1 - t) log_sigmoid(-x)), log_sigmoid(x) = -softplus(-x); from probabilities clipped to
// [eps, 1 - eps].
int bce_elements(graph::OpBuilder& b, const Loss& loss, int p, int t) {
  t = smooth_labels(b, t, loss.label_smoothing, 2.0f);
  if (loss.from_logits) {
    const int sp_neg = o::unary(b, UnaryFn::softplus, o::mul_scalar(b, p, -1.0f));  // -log_sigmoid(x)
    const int sp_pos = o::unary(b, UnaryFn::softplus, p);                           // -log_sigmoid(-x)
    return o::binary(b, BinaryFn::add, mul(b, t, sp_neg), mul(b, one_minus(b, t), sp_pos));
  }
  const int c = o::unary(b, UnaryFn::clip, p, kEpsilon, 1.0f - kEpsilon);
  return o::mul_scalar(
      b, o::binary(b, BinaryFn::add, mul(b, t, log_of(b, c)), mul(b, one_minus(b, t), log_of(b, one_minus(b, c)))),
      -1.0f);
}

int last_axis_mean(graph::OpBuilder& b, int x) { return o::reduce(b, ReduceFn::mean, x, {-1}, false); }

int binary_focal(graph::OpBuilder& b, const Loss& loss, int p, int t) {
  t = smooth_labels(b, t, loss.label_smoothing, 2.0f);
  if (loss.from_logits) p = o::unary(b, UnaryFn::sigmoid, p);
  const int c = o::unary(b, UnaryFn::clip, p, kEpsilon, 1.0f - kEpsilon);
  const int bce = o::mul_scalar(
      b, o::binary(b, BinaryFn::add, mul(b, t, log_of(b, c)), mul(b, one_minus(b, t), log_of(b, one_minus(b, c)))),
      -1.0f);
  const int p_t = o::binary(b, BinaryFn::add, mul(b, t, p), mul(b, one_minus(b, t), one_minus(b, p)));
  int focal = mul(b, o::binary(b, BinaryFn::power, one_minus(b, p_t), o::scalar(b, loss.gamma, p_t)), bce);
  if (loss.apply_class_balancing) {
    const int w =
        o::add_scalar(b, o::mul_scalar(b, t, 2.0f * loss.alpha - 1.0f), 1.0f - loss.alpha);  // t a + (1-t)(1-a)
    focal = mul(b, w, focal);
  }
  return focal;  // per element
}

}  // namespace

const std::vector<LossClass>& loss_classes() {
  static const std::vector<LossClass> v = {
      {"mean_squared_error", "MeanSquaredError", "mean_squared_error"},
      {"mean_absolute_error", "MeanAbsoluteError", "mean_absolute_error"},
      {"mean_squared_logarithmic_error", "MeanSquaredLogarithmicError", "mean_squared_logarithmic_error"},
      {"huber", "Huber", "huber_loss"},
      {"kl_divergence", "KLDivergence", "kl_divergence"},
      {"poisson", "Poisson", "poisson"},
      {"cosine_similarity", "CosineSimilarity", "cosine_similarity"},
      {"hinge", "Hinge", "hinge"},
      {"squared_hinge", "SquaredHinge", "squared_hinge"},
      {"binary_crossentropy", "BinaryCrossentropy", "binary_crossentropy"},
      {"binary_focal_crossentropy", "BinaryFocalCrossentropy", "binary_focal_crossentropy"},
      {"categorical_crossentropy", "CategoricalCrossentropy", "categorical_crossentropy"},
      {"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"}};
  return v;
}

namespace {
// The canonical name as the table's own string (no allocation: fit's per-batch checks call is_sparse); null: unknown.
const char* canonical_name_or_null(const std::string& name) {
  for (const LossClass& c : loss_classes())
    if (name == c.name || name == c.keras_class) return c.name;
  for (const Alias& a : kAliases)
    if (name == a.alias) return a.name;
  return nullptr;
}
}  // namespace

std::string canonical_loss_name(const std::string& name) {
  if (const char* n = canonical_name_or_null(name)) return n;
  throw InvalidArgument("unknown loss '" + name + "' (expected one of " + known_names() + ")");
}

const LossClass& loss_class(const Loss& loss) {
  const std::string n = canonical_loss_name(loss.name);
  for (const LossClass& c : loss_classes())
    if (n == c.name) return c;
  throw InvalidArgument("unknown loss '" + loss.name + "'");  // unreachable: canonical names are in the table
}

void validate_loss(const Loss& loss) {
  const std::string n = canonical_loss_name(loss.name);
  auto bad = [&](const std::string& what) { throw InvalidArgument("loss '" + loss.name + "': " + what); };
  const bool smoothing =
      n == "binary_crossentropy" || n == "categorical_crossentropy" || n == "binary_focal_crossentropy";
  const bool logits = smoothing || n == "sparse_categorical_crossentropy";
  if (!logits && loss.from_logits) bad("has no from_logits option");
  if (!(loss.label_smoothing >= 0.0f && loss.label_smoothing <= 1.0f))
    bad("label_smoothing must be in [0, 1], got " + std::to_string(loss.label_smoothing));
  if (!smoothing && loss.label_smoothing != 0.0f) bad("has no label_smoothing option");
  if (loss.ignore_class && n != "sparse_categorical_crossentropy")
    bad("has no ignore_class option (SparseCategoricalCrossentropy has)");
  if (!(loss.delta > 0.0f) || !std::isfinite(loss.delta))
    bad("delta must be positive, got " + std::to_string(loss.delta));
  if (n != "huber" && loss.delta != 1.0f) bad("has no delta option (Huber has)");
  if (!(loss.gamma >= 0.0f) || !std::isfinite(loss.gamma)) bad("gamma must be >= 0, got " + std::to_string(loss.gamma));
  if (!(loss.alpha >= 0.0f && loss.alpha <= 1.0f)) bad("alpha must be in [0, 1], got " + std::to_string(loss.alpha));
  if (n != "binary_focal_crossentropy" && (loss.gamma != 2.0f || loss.alpha != 0.25f || loss.apply_class_balancing))
    bad("has no gamma, alpha or apply_class_balancing option (BinaryFocalCrossentropy has)");
}

bool is_sparse(const Loss& loss) {
  const char* n = canonical_name_or_null(loss.name);
  if (!n) canonical_loss_name(loss.name);  // the unknown-name error
  return std::strcmp(n, "sparse_categorical_crossentropy") == 0;
}

std::optional<Op> fused_loss_op(const Loss& loss) {
  const std::string n = canonical_loss_name(loss.name);
  if (n == "mean_squared_error") return Op::MseLoss;
  if (n == "binary_crossentropy") return Op::BceLoss;  // smoothed targets when label_smoothing is set
  if (n == "categorical_crossentropy") return Op::CceLoss;
  if (n == "sparse_categorical_crossentropy" && !loss.ignore_class) return Op::SparseCceLoss;
  return std::nullopt;
}

namespace {

// Keras' loss function before its reduction (LossFunctionWrapper.call): the loss per position (batch, ...), the last
// (class or feature) axis reduced by the loss's own sum or mean. *valid: a float32 0/1 of that shape where the loss
// leaves positions out itself (ignore_class), else untouched.
int position_losses(graph::OpBuilder& b, const Loss& loss, int p, int t, int* valid) {
  const std::string n = canonical_loss_name(loss.name);
  if (n == "sparse_categorical_crossentropy") return sparse_cce_positions(b, loss, p, t, valid);
  if (n == "categorical_crossentropy") return cce_positions(b, loss, p, t);
  if (n == "binary_crossentropy") return last_axis_mean(b, bce_elements(b, loss, p, t));
  if (n == "binary_focal_crossentropy") return last_axis_mean(b, binary_focal(b, loss, p, t));
  if (n == "mean_squared_error") return last_axis_mean(b, o::unary(b, UnaryFn::square, sub(b, p, t)));
  if (n == "mean_absolute_error") return last_axis_mean(b, o::unary(b, UnaryFn::abs, sub(b, p, t)));
  if (n == "huber") {
    const int e = sub(b, p, t);
    const int a = o::unary(b, UnaryFn::abs, e);
    const int quadratic = o::mul_scalar(b, o::unary(b, UnaryFn::square, e), 0.5f);
    const int linear = o::add_scalar(b, o::mul_scalar(b, a, loss.delta), -0.5f * loss.delta * loss.delta);
    const int small = o::compare(b, BinaryFn::less_equal, a, o::scalar(b, loss.delta, a));
    return last_axis_mean(b, o::where(b, small, quadratic, linear));
  }
  if (n == "kl_divergence") {
    const int tc = o::unary(b, UnaryFn::clip, t, kEpsilon, 1.0f);
    const int pc = o::unary(b, UnaryFn::clip, p, kEpsilon, 1.0f);
    const int terms = mul(b, tc, log_of(b, o::binary(b, BinaryFn::divide, tc, pc)));
    return o::reduce(b, ReduceFn::sum, terms, {-1}, false);
  }
  if (n == "mean_squared_logarithmic_error") {
    auto log1 = [&](int x) {
      return log_of(b, o::add_scalar(b, o::binary(b, BinaryFn::maximum, x, o::scalar(b, kEpsilon, x)), 1.0f));
    };
    return last_axis_mean(b, o::unary(b, UnaryFn::square, sub(b, log1(p), log1(t))));
  }
  if (n == "poisson") return last_axis_mean(b, sub(b, p, mul(b, t, log_of(b, o::add_scalar(b, p, kEpsilon)))));
  if (n == "cosine_similarity") {
    const int dot = o::reduce(b, ReduceFn::sum, mul(b, l2_normalize(b, t), l2_normalize(b, p)), {-1}, false);
    return o::mul_scalar(b, dot, -1.0f);
  }
  if (n == "hinge" || n == "squared_hinge") {
    const int margin = one_minus(b, mul(b, hinge_labels(b, t), p));
    int h = o::binary(b, BinaryFn::maximum, margin, o::scalar(b, 0.0f, margin));
    if (n == "squared_hinge") h = o::unary(b, UnaryFn::square, h);
    return last_axis_mean(b, h);
  }
  throw InvalidArgument("loss '" + loss.name + "' has no implementation");  // every table entry is handled above
}

// Keras' "sum_over_batch_size" with positions left out (a mask as sample weights, losses/loss.py apply_mask): the
// sum of the kept positions' losses over their count, 0 when none is kept (divide_no_nan; the sum is then 0 too).
int mean_over_kept(graph::OpBuilder& b, int per, int kept) {
  const int count = all_axes_sum(b, kept);
  return o::binary(b, BinaryFn::divide, all_axes_sum(b, mul(b, per, kept)),
                   o::binary(b, BinaryFn::maximum, count, o::scalar(b, 1.0f, count)));
}

}  // namespace

int emit_loss(graph::Graph& g, const Loss& loss, int p, int t, const std::string& name) {
  validate_loss(loss);
  graph::OpBuilder b{g, nullptr, name};
  const std::string n = canonical_loss_name(loss.name);
  if (std::optional<Op> fused = fused_loss_op(loss)) {
    if (n == "binary_crossentropy") t = smooth_labels(b, t, loss.label_smoothing, 2.0f);
    if (n == "categorical_crossentropy") t = smooth_labels(b, t, loss.label_smoothing, float(g[p].shape[-1]));
    graph::Attrs at;
    at.from_logits = loss.from_logits;
    return g.add(*fused, {p, t}, at, name);
  }
  int valid = -1;
  const int per = position_losses(b, loss, p, t, &valid);
  return valid < 0 ? all_axes_mean(b, per) : mean_over_kept(b, per, valid);
}

int emit_weighted_loss(graph::Graph& g, const Loss& loss, int p, int t, int mask, int weight, const std::string& name) {
  validate_loss(loss);
  graph::OpBuilder b{g, nullptr, name};
  int valid = -1;
  const int per = position_losses(b, loss, p, t, &valid);  // (batch, ...): the last axis reduced
  const Shape per_shape = g[per].shape;
  int weighted = per;
  if (weight >= 0) {
    int w = weight;
    // Keras' squeeze_or_expand_to_same_rank: weights of (batch, 1) weight losses of (batch,).
    if (g[w].shape.rank() == per_shape.rank() + 1 && g[w].shape[-1] == 1) w = o::reshape(b, w, per_shape);
    // Then Keras multiplies with NumPy broadcasting: (batch, 1) weighs every step of (batch, steps) losses alike.
    bool broadcasts = g[w].shape.rank() == per_shape.rank();
    for (int i = 0; broadcasts && i < per_shape.rank(); ++i)
      broadcasts = g[w].shape[i] == per_shape[i] || (i > 0 && g[w].shape[i] == 1);
    if (!broadcasts)
      throw InvalidArgument("loss '" + loss.name + "': sample_weight of shape " + g[weight].shape.to_string() +
                            " does not match the per-position losses " + per_shape.to_string() +
                            " (give one weight per row, or per time step of a sequence output)");
    weighted = mul(b, per, w);
  }
  if (mask >= 0 && g[mask].shape != per_shape)
    throw Unsupported(
        "loss '" + loss.name + "' over an output carrying a Keras mask: its per-step losses " + per_shape.to_string() +
        " do not have the mask's shape " + g[mask].shape.to_string() +
        (weight >= 0 ? "" : " (a mask of (batch, steps) weights losses of (batch, steps, features) outputs)"));
  int kept = mask < 0 ? -1 : o::cast(b, mask, DType::f32);
  if (valid >= 0) kept = kept < 0 ? valid : mul(b, kept, valid);  // the mask AND the loss's own (ignore_class)
  // Keras' reduce_weighted_values: sum(loss * w) over the count of positions (not the sum of the weights); with a
  // mask (apply_mask), over the count of the kept positions.
  return kept < 0 ? all_axes_mean(b, weighted) : mean_over_kept(b, weighted, kept);
}

}  // namespace tk::nn

namespace tk::losses {
void check(const Loss& loss) { nn::validate_loss(loss); }
}  // namespace tk::losses
