// Model's training API: each call is Keras' name for a pass of the model's nn::Trainer (nn/training/trainer.h), and
// the memory questions asked before one (memory_plan, the largest batch that fits, planning for another device).
#include <string>

#include "nn/distribute/strategy_state.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {

History Model::fit(const Tensor& x, const Tensor& y, FitOptions options) {
  return fit(std::vector<Tensor>{x}, std::vector<Tensor>{y}, std::move(options));
}
History Model::fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y, FitOptions options) {
  return trainer_->fit(x, y, std::move(options));
}
History Model::fit(const data::Dataset& dataset, FitOptions options) {
  return trainer_->fit(dataset, std::move(options));
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, EvaluateOptions options) {
  return evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y}, options);
}
Logs Model::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y, EvaluateOptions options) {
  return trainer_->evaluate(x, y, options);
}
Logs Model::evaluate(const data::Dataset& dataset, EvaluateOptions options) {
  return trainer_->evaluate(dataset, options);
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) { return predict(std::vector<Tensor>{x}, batch_size)[0]; }
std::vector<Tensor> Model::predict(const std::vector<Tensor>& x, int64_t batch_size) {
  return trainer_->predict(x, batch_size);
}
std::vector<Tensor> Model::predict(const data::Dataset& dataset) { return trainer_->predict(dataset); }

const Logs& Model::train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
  return trainer_->train_on_batch(x, y);
}

const Logs& Model::train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                                  const Tensor& sample_weight) {
  return trainer_->train_on_batch(x, y, &sample_weight);
}

MemoryPlan Model::memory_plan(int64_t batch_size) {
  trainer_->check_compiled("memory_plan");
  if (batch_size <= 0)
    throw InvalidArgument("memory_plan: batch_size must be positive, got " + std::to_string(batch_size));
  MemoryPlan plan;
  const bool remat = rematerialization == Remat::on || (rematerialization == Remat::automatic &&
                                                        (plan = trainer_->memory_plan_with(batch_size, false)).total >
                                                            trainer_->memory_available_for_training());
  if (remat || plan.batch_size == 0) plan = trainer_->memory_plan_with(batch_size, remat);
  // What the other policy would take (the layers without a policy of their own follow it: layer_dtype_policy).
  plan.alternative_policy = dtype_policy_ == "float32" ? "mixed_bfloat16" : "float32";
  plan_policy_override_ = plan.alternative_policy;
  try {
    plan.alternative_total = trainer_->memory_plan_with(batch_size, remat).total;
  } catch (...) {
    plan_policy_override_.clear();
    throw;
  }
  plan_policy_override_.clear();
  return plan;
}

int64_t Model::largest_batch_that_fits(size_t available, int64_t cap) {
  return trainer_->largest_batch_that_fits_on(0, available, cap);
}

size_t Model::memory_available_for_training() const { return trainer_->memory_available_for_training(); }

int64_t Model::auto_batch_size(int64_t cap, bool report, const std::string& what) {
  return trainer_->auto_batch_size(cap, report, what);
}

int64_t Model::auto_micro_batch_size(int64_t batch, bool report, const std::string& what) {
  return trainer_->auto_micro_batch_size(batch, report, what);
}

void Model::plan_for_absent_device(Device device, size_t budget) {
  if (budget == 0) throw InvalidArgument("plan_for_absent_device: the budget of " + device.to_string() + " is 0 bytes");
  if (strategy_)
    throw InvalidArgument("plan_for_absent_device: model '" + name_ + "' was compiled under " + strategy_->description +
                          ", which places its replicas");
  device_ = device;
  trainer_->reset(nullptr, budget);
}

}  // namespace tk
