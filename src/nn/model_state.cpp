// Model::training_state / restore_training_state: what BackupAndRestore needs to resume a fit bit for bit.
#include <cmath>
#include <cstdio>

#include "graph/backend.h"
#include "graph/host_threads.h"
#include "nn/compiler/programs.h"
#include "nn/optimizer_rule.h"
#include "nn/training/trainer.h"
#include "runtime/log.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/training_state.h"

namespace tk {

TrainingState Model::training_state() {
  TrainingState s = training_state_view();
  for (Tensor& w : s.weights) w = w.to_device(Device::cpu());  // host copies, independent of further training
  for (Tensor& t : s.optimizer_slots) t = t.to_device(Device::cpu());
  return s;
}

TrainingState Model::training_state_view() {
  trainer_->check_compiled("training_state");
  trainer_->sync_host_weights();
  TrainingState s;
  s.model_name = name_;
  for (const LayerPtr& l : layers_)
    for (const Weight& w : l->weights()) {
      s.weight_names.push_back(w.name);
      s.weights.push_back(w.value);  // shared
    }
  s.optimizer = optimizer_->name();
  s.slots_per_variable = optimizer_->slots_per_variable();
  nn::ProgramCache& programs = trainer_->programs();
  programs.synchronize();                        // queued steps write the slots
  for (const Weight* w : trainable_weights()) {  // the live slots; zeros before the first step
    const std::vector<Tensor>* live = programs.optimizer_state().live_slots(*w);
    for (int k = 0; k < s.slots_per_variable; ++k)
      s.optimizer_slots.push_back(
          live ? (*live)[static_cast<size_t>(k)]
               : Tensor(nn::slot_shape(*optimizer_, k, w->value.shape()), w->value.dtype(), Device::cpu(),
                        "training state: " + w->name + " slot " + std::to_string(k) + " (zeros)"));
  }
  for (const float v : get_optimizer_variables()) s.optimizer_slots.push_back(Tensor::from_vector<float>(Shape{}, {v}));
  s.iterations = optimizer_->iterations();
  s.learning_rate = optimizer_->learning_rate();
  s.step = trainer_->step;
  s.threads = device_.kind == DeviceKind::cpu ? graph::host_threads() : 0;
  // The kernels this model's programs were measured to run best with (the CPU's GEMM engines).
  s.kernel_choices = graph::backend(device_.kind).kernel_choices(programs.programs());
  s.dtype_policy = dtype_policy_;
  if (const float* st = programs.optimizer_state().loss_scale_state()) {
    s.loss_scale = st[0];
    s.loss_scale_counter = static_cast<int64_t>(st[1]);
    s.skipped_steps = static_cast<int64_t>(st[2]);
  }
  s.position = trainer_->position;
  return s;
}

void Model::restore_training_state(const TrainingState& s) {
  trainer_->check_compiled("restore_training_state");
  if (!has_graph_)
    throw InvalidArgument("restore_training_state: model '" + name_ +
                          "' is not built yet (give it an Input layer, or restore from a callback's on_train_begin)");
  const std::string where = "restore_training_state (model '" + name_ + "', saved from '" + s.model_name + "'): ";
  std::vector<Weight*> mine;
  for (const LayerPtr& l : layers_)
    for (Weight& w : l->weights()) mine.push_back(&w);
  if (mine.size() != s.weights.size() || s.weight_names.size() != s.weights.size())
    throw InvalidArgument(where + "the model has " + std::to_string(mine.size()) + " weights, the state " +
                          std::to_string(s.weights.size()) + " (build the same model the state was saved from)");
  for (size_t i = 0; i < mine.size(); ++i)
    if (s.weights[i].shape() != mine[i]->value.shape() || s.weights[i].dtype() != mine[i]->value.dtype())
      throw InvalidArgument(where + "weight " + std::to_string(i) + " '" + mine[i]->name + "' is " +
                            mine[i]->value.shape().to_string() + " " + std::string(dtype_name(mine[i]->value.dtype())) +
                            " but the state's '" + s.weight_names[i] + "' is " + s.weights[i].shape().to_string() +
                            " " + std::string(dtype_name(s.weights[i].dtype())));
  // The state's slots per variable: the ones this optimizer holds, or (a state written before trainkit held only the
  // slots Keras makes) every slot of the rule, of which the held ones are taken: the others were never read.
  const nn::RuleState& rule = nn::rule_state(*optimizer_);
  const size_t per = static_cast<size_t>(optimizer_->slots_per_variable());
  const size_t file_per = static_cast<size_t>(s.slots_per_variable);
  std::vector<size_t> pick(per);  // held slot k is the state's slot pick[k] of each variable
  for (size_t k = 0; k < per; ++k) pick[k] = file_per == per ? k : rule.held[k];
  if (s.optimizer != optimizer_->name() || (file_per != per && file_per != rule.rule->slots.size()))
    throw InvalidArgument(where + "the model is compiled with " + optimizer_->name() + " (" + std::to_string(per) +
                          " slot(s) per variable) but the state holds " +
                          (s.optimizer.empty() ? std::string("no optimizer") : s.optimizer) + " state (" +
                          std::to_string(file_per) + " slot(s) per variable; compile with the same optimizer)");
  const std::vector<const Weight*> trainable = trainable_weights();
  const size_t n_vars = get_optimizer_variables().size();  // after the slots (Nadam's u_product)
  if (s.optimizer_slots.size() != trainable.size() * file_per + n_vars)
    throw InvalidArgument(
        where + "the state has " + std::to_string(s.optimizer_slots.size()) + " optimizer tensors, the model needs " +
        std::to_string(trainable.size() * file_per + n_vars) + " (" + std::to_string(trainable.size()) +
        " trainable weights, " + std::to_string(file_per) + " slots each, " + std::to_string(n_vars) +
        " optimizer variables; were layers frozen differently?)");
  for (size_t i = 0; i < trainable.size(); ++i)
    for (size_t k = 0; k < per; ++k) {
      const Tensor& t = s.optimizer_slots[i * file_per + pick[k]];
      const Shape want = nn::slot_shape(*optimizer_, static_cast<int>(k), trainable[i]->value.shape());
      if (t.shape() != want || t.dtype() != trainable[i]->value.dtype())
        throw InvalidArgument(where + "optimizer slot " + std::to_string(k) + " of '" + trainable[i]->name + "' is " +
                              t.shape().to_string() + ", " + optimizer_->name() + " keeps " + want.to_string() +
                              " for the weight's " + trainable[i]->value.shape().to_string());
    }
  std::vector<float> vars;
  for (size_t j = 0; j < n_vars; ++j) {
    const Tensor& t = s.optimizer_slots[trainable.size() * file_per + j];
    if (t.numel() != 1 || t.dtype() != DType::f32 || !std::isfinite(t.data<float>()[0]))
      throw InvalidArgument(where + "optimizer variable " + std::to_string(j) + " is not a finite float32 scalar");
    vars.push_back(t.data<float>()[0]);
  }
  if (s.iterations < 0 || s.position.epoch < 0 || s.position.batch < 0 || s.position.shuffles < 0 ||
      s.position.pass_offset < 0)
    throw InvalidArgument(where + "negative counters in the state (iterations " + std::to_string(s.iterations) +
                          ", epoch " + std::to_string(s.position.epoch) + ")");
  if (s.dtype_policy != dtype_policy_)
    throw InvalidArgument(where + "the state was saved under dtype policy '" + s.dtype_policy +
                          "' but the model's is '" + dtype_policy_ + "' (set_dtype_policy('" + s.dtype_policy +
                          "') before restoring, or restore into a model made under that policy)");
  if (!std::isfinite(s.loss_scale) || s.loss_scale < 0.0f || s.loss_scale_counter < 0 || s.skipped_steps < 0)
    throw InvalidArgument(where + "bad loss-scale state in the state (scale " + std::to_string(s.loss_scale) +
                          ", counter " + std::to_string(s.loss_scale_counter) + ", skipped " +
                          std::to_string(s.skipped_steps) + ")");
  if (s.loss_scale > 0.0f && !trainer_->programs().scales_loss())
    throw InvalidArgument(where + "the state holds a loss scale (" + std::to_string(s.loss_scale) +
                          ") but the model trains without loss scaling (compile with "
                          "tk::optimizers::LossScaleOptimizer, or under mixed_float16)");
  // Everything checked: now copy (nothing above changed the model).
  set_weights(s.weights);
  std::vector<std::vector<Tensor>> slots(trainable.size());
  for (size_t i = 0; i < trainable.size(); ++i)
    for (size_t k = 0; k < per; ++k) slots[i].push_back(s.optimizer_slots[i * file_per + pick[k]]);
  set_optimizer_slots(slots, s.iterations);
  set_optimizer_variables(vars);
  nn::OptimizerState& st = trainer_->programs().optimizer_state();
  if (s.loss_scale > 0.0f)
    st.set_loss_scale_state(s.loss_scale, static_cast<float>(s.loss_scale_counter),
                            static_cast<float>(s.skipped_steps));
  else if (st.loss_scale_state())  // a state without loss scaling (format 2): start from the initial scale
    st.set_loss_scale_state(
        optimizer_->config().loss_scale_initial > 0.0f ? optimizer_->config().loss_scale_initial : 32768.0f, 0.0f,
        0.0f);
  // A schedule follows the step count.
  if (!optimizer_->learning_rate_schedule()) optimizer_->set_learning_rate(s.learning_rate);
  trainer_->step = s.step;
  // The same bits need the same partitions: run on the thread count the state was made with.
  if (s.threads > 0 && device_.kind == DeviceKind::cpu && s.threads != graph::host_threads()) {
    const int chosen = graph::host_threads();
    if (graph::pin_host_threads(s.threads)) {
      if (runtime::log_enabled(runtime::LogSeverity::info))
        std::fprintf(stderr, "Note: resuming on %d CPU threads as the saved state was made (this machine chose %d)\n",
                     s.threads, chosen);
    } else if (runtime::log_enabled(runtime::LogSeverity::warning)) {
      std::fprintf(stderr,
                   "WARNING: the saved state was made on %d CPU threads but this process may use at most %d: "
                   "training continues, but not bit for bit as an uninterrupted run\n",
                   s.threads, chosen);
    }
  }
  // ... and the same kernels (the CPU's GEMM engine per shape: each was chosen by measurement, which may differ on
  // this run).
  if (graph::has_backend(device_.kind)) graph::backend(device_.kind).set_kernel_choices(s.kernel_choices);
  trainer_->position = s.position;
  trainer_->resume = s.position;
}

}  // namespace tk
