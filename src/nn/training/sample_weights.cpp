#include "nn/training/sample_weights.h"

#include <cmath>
#include <string>
#include <vector>

#include "trainkit/core/error.h"

namespace tk::nn {
namespace {

// The output's shape without its batch and last axes: where its per-position losses are (empty: one per row).
bool matches_positions(const Shape& w, const Shape& out) {
  if (w.rank() != out.rank() - 1) return false;
  for (int i = 1; i < w.rank(); ++i)
    if (w[i] != out[i]) return false;
  return true;
}

// Output `j`'s class count: its last axis, 2 for a single sigmoid unit.
int64_t class_count(const Model& model) {
  const int64_t last = model.outputs()[0].shape()[-1];
  return last == 1 ? 2 : last;
}

std::string output_name(const Model& model) { return model.outputs()[0].node->layer->name; }

void require_single_output(const Model& model, const char* what) {
  if (model.outputs().size() != 1)
    throw InvalidArgument(std::string(what) +
                          ": class_weight is only supported for models with a single output (model '" + model.name() +
                          "' has " + std::to_string(model.outputs().size()) + "); give sample_weight instead");
}

}  // namespace

int64_t sample_weight_key(const Tensor* w) {
  if (!w) return 0;
  return w->shape().rank() == 1 ? -1 : w->dim(1);
}

void check_sample_weight(const Model& model, const Tensor& w, int64_t n, const char* what) {
  if (!w.defined() || w.shape().rank() < 1 || w.shape().rank() > 2)
    throw InvalidArgument(std::string(what) +
                          ": sample_weight must have shape (rows,), (rows, 1) or (rows, steps), got " +
                          (w.defined() ? w.shape().to_string() : std::string("nothing")));
  if (w.dim(0) != n)
    throw InvalidArgument(std::string(what) + ": sample_weight has " + std::to_string(w.dim(0)) + " rows but x has " +
                          std::to_string(n) + " (one weight per row)");
  if (!w.on_host())
    throw InvalidArgument(std::string(what) + ": sample_weight is in the memory of " + w.device().to_string() +
                          "; give a host array");
  if (w.dtype() == DType::boolean)
    throw InvalidArgument(std::string(what) + ": sample_weight must be numeric, got bool");
  if (w.shape().rank() == 1 || w.dim(1) == 1) return;
  // Per time step: one output, whose per-position losses are (rows, steps).
  const Shape& out = model.outputs()[0].shape();
  if (model.outputs().size() != 1 || !matches_positions(w.shape(), out))
    throw InvalidArgument(
        std::string(what) + ": sample_weight of shape " + w.shape().to_string() + " must be (rows,) or (rows, 1)" +
        (model.outputs().size() != 1 ? std::string(" for a model with several outputs (Keras repeats it for each)")
                                     : " or the per-position losses' shape (rows" +
                                           (out.rank() > 2 ? ", " + std::to_string(out[1]) : std::string()) +
                                           ") of output '" + output_name(model) + "' " + out.to_string()));
}

void check_class_weight(const Model& model, const std::map<int, float>& class_weight, const char* what) {
  require_single_output(model, what);
  const int64_t classes = class_count(model);
  for (const auto& [id, weight] : class_weight)
    if (id < 0 || id >= classes)
      throw InvalidArgument(std::string(what) + ": class_weight names class " + std::to_string(id) + ", outside the " +
                            std::to_string(classes) + " classes [0, " + std::to_string(classes) + ") of output '" +
                            output_name(model) + "' " + model.outputs()[0].shape().to_string());
}

Tensor class_weight_to_sample_weights(const Model& model, const Tensor& y, const std::map<int, float>& class_weight,
                                      const char* what) {
  check_class_weight(model, class_weight, what);
  const int64_t classes = class_count(model);
  const Shape& s = y.shape();
  const bool integer = !is_floating(y.dtype());
  const int64_t rows = s.rank() >= 1 ? s[0] : 0;
  const int64_t width = s.rank() == 2 ? s[1] : 1;
  if (s.rank() < 1 || s.rank() > 2 || (integer && width != 1))
    throw InvalidArgument(std::string(what) + ": class_weight needs one class per row: targets of shape (rows,), " +
                          "(rows, 1) or one-hot (rows, classes), got " + s.to_string() +
                          " (for a sequence, give sample_weight of (rows, steps))");
  const Tensor yf = y.dtype() == DType::f32 ? y : y.to(DType::f32);
  const float* t = yf.data<float>();  // (rows, width)
  // Keras' lookup: the class's weight, 1 when class_weight does not list it (a dense table: one look-up per row).
  std::vector<float> table(static_cast<size_t>(classes), 1.0f);
  for (const auto& [id, weight] : class_weight) table[static_cast<size_t>(id)] = weight;
  Tensor w(Shape{rows}, DType::f32);
  float* out = w.data<float>();  // (rows,)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = t + r * width;
    int64_t id = 0;
    if (width == 1) {
      id = static_cast<int64_t>(std::nearbyint(row[0]));  // Keras: np.round (half to even)
      if (!std::isfinite(row[0])) id = -1;
    } else {
      for (int64_t k = 1; k < width; ++k)
        if (row[k] > row[id]) id = k;  // the first maximum, as np.argmax
    }
    if (id < 0 || id >= classes)
      throw InvalidArgument(std::string(what) + ": class_weight: row " + std::to_string(r) + "'s target is class " +
                            (std::isfinite(row[0]) ? std::to_string(id) : std::string("NaN/Inf")) + ", outside the " +
                            std::to_string(classes) + " classes of output '" + output_name(model) + "'");
    out[r] = table[static_cast<size_t>(id)];
  }
  return w;
}

}  // namespace tk::nn
