// The checks every pass makes before it runs: compiled, dtype policies unchanged since the programs were built, the
// data's arrays against the model's inputs and outputs, a dataset element's components.
#include <string>

#include "nn/compiler/losses.h"
#include "nn/training/sample_weights.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"

namespace tk::nn {

void Trainer::check_compiled(const char* what) const {
  if (!model_.optimizer())
    throw InvalidArgument(std::string(what) + ": model '" + model_.name() +
                          "' must be compiled first (call compile())");
  check_policies(what);
}

void Trainer::check_policies(const char* what) const {
  if (run_policies_.empty()) return;
  for (size_t i = 0; i < model_.layers().size() && i < run_policies_.size(); ++i) {
    const Layer& l = *model_.layers()[i];
    if (model_.layer_dtype_policy(l) != run_policies_[i])
      throw InvalidArgument(std::string(what) + ": layer '" + l.name + "' of model '" + model_.name() +
                            "' was given dtype policy '" + model_.layer_dtype_policy(l) +
                            "' after its programs were built under '" + run_policies_[i] +
                            "'; set policies before the first fit/evaluate/predict, or compile() again");
  }
}

namespace {
// a[1:] == b[1:] without building Shapes: check_data runs at every train_on_batch and must not allocate.
bool same_sample_shape(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int i = 1; i < a.rank(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
int64_t sample_numel(const Shape& s) {
  int64_t n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return n;
}
}  // namespace

void Trainer::check_data(const std::vector<Tensor>& x, const std::vector<Tensor>* y, const char* what,
                         bool weighted) const {
  if (x.size() != model_.inputs().size())
    throw InvalidArgument(std::string(what) + ": model '" + model_.name() + "' has " +
                          std::to_string(model_.inputs().size()) + " input(s) but " + std::to_string(x.size()) +
                          " x array(s) were given");
  const int64_t n = x.empty() || !x[0].defined() || x[0].shape().rank() == 0 ? 0 : x[0].dim(0);
  for (size_t i = 0; i < x.size(); ++i) {
    const Shape& want = model_.inputs()[i].shape();
    if (!x[i].defined() || !same_sample_shape(x[i].shape(), want))
      throw InvalidArgument(std::string(what) + ": input " + std::to_string(i) + " ('" +
                            model_.inputs()[i].node->layer->name + "') of model '" + model_.name() +
                            "' expects shape " + want.to_string() + " but x has shape " +
                            (x[i].defined() ? x[i].shape().to_string() : std::string("nothing")) +
                            " (reshape the data, or start the model with Input/Flatten for this shape)");
    if (x[i].dim(0) != n)
      throw InvalidArgument(std::string(what) + ": x arrays differ in sample count (" + std::to_string(n) + " vs " +
                            std::to_string(x[i].dim(0)) + ")");
    if (!x[i].on_host())
      throw InvalidArgument(std::string(what) + ": x array " + std::to_string(i) + " is in the memory of " +
                            x[i].device().to_string() + "; give host arrays (a Dataset's on_device() stages itself)");
  }
  if (!y) return;
  const size_t targets = y->size() - (weighted && !y->empty() ? 1 : 0);
  if (targets != model_.outputs().size() || (weighted && y->empty()))
    throw InvalidArgument(std::string(what) + ": model '" + model_.name() + "' has " +
                          std::to_string(model_.outputs().size()) + " output(s) but " + std::to_string(targets) +
                          " y array(s) were given");
  if (weighted) check_sample_weight(model_, y->back(), n, what);
  if (model_.losses().size() != 1 && model_.losses().size() != model_.outputs().size())
    throw InvalidArgument(std::string(what) + ": " + std::to_string(model_.losses().size()) + " losses for " +
                          std::to_string(model_.outputs().size()) + " outputs (give one loss, or one per output)");
  for (size_t j = 0; j < targets; ++j) {
    const Tensor& t = (*y)[j];
    const Shape& out = model_.outputs()[j].shape();
    const Loss& loss = model_.losses().size() == 1 ? model_.losses()[0] : model_.losses()[j];
    const bool sparse = nn::is_sparse(loss);
    bool ok = t.defined() && t.shape().rank() >= 1;
    if (ok && sparse) {
      // Integer class ids: the output's shape without its last axis, or with a last axis of 1.
      const Shape& s = t.shape();
      ok = (s.rank() == out.rank() - 1 || (s.rank() == out.rank() && s[-1] == 1)) &&
           sample_numel(s) * out[-1] == sample_numel(out);
    } else if (ok) {
      ok = same_sample_shape(t.shape(), out);
    }
    if (!ok) {
      std::string want = out.to_string();
      if (sparse)
        want = "(n" + (out.rank() > 2 ? ", " + out.sample_shape().to_string().substr(1) : std::string(")")) +
               " of class ids, without the last axis of " + out.to_string();
      throw InvalidArgument(std::string(what) + ": target " + std::to_string(j) + " for output '" +
                            model_.outputs()[j].node->layer->name + "' (shape " + out.to_string() + ", loss " +
                            loss.name + ") must have shape " + want + ", got " +
                            (t.defined() ? t.shape().to_string() : "nothing") +
                            (sparse ? "" : " (for integer labels use sparse_categorical_crossentropy)"));
    }
    if (t.dim(0) != n)
      throw InvalidArgument(std::string(what) + ": x has " + std::to_string(n) + " samples but y " + std::to_string(j) +
                            " has " + std::to_string(t.dim(0)));
  }
}

void Trainer::split_element(data::Element& e, std::vector<Tensor>& x, std::vector<Tensor>& y, bool need_y,
                            const char* what) const {
  const size_t nx = model_.inputs().size(), ny = model_.outputs().size();
  if (e.size() < nx || (need_y && e.size() != nx + ny && e.size() != nx + ny + 1))
    throw InvalidArgument(
        std::string(what) + ": the dataset's elements have " + std::to_string(e.size()) + " component(s) " +
        data::shapes_of(e) + " but model '" + model_.name() + "' takes " + std::to_string(nx) + " input(s)" +
        (need_y
             ? " and " + std::to_string(ny) + " target(s): elements must be (x..., y...) or (x..., y..., sample_weight)"
             : "") +
        " (batch the dataset, and map it to that tuple)");
  for (const Tensor& t : e)
    if (t.shape().rank() == 0)
      throw InvalidArgument(std::string(what) + ": the dataset's elements " + data::shapes_of(e) +
                            " have a scalar component: fit takes batches (add .batch(n) to the pipeline)");
  x.assign(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(nx));
  y.assign(e.begin() + static_cast<std::ptrdiff_t>(nx), e.end());
}

}  // namespace tk::nn
