// Model::training_state / restore_training_state: what BackupAndRestore needs to resume a fit bit for bit.
#include "trainkit/nn/training_state.h"

#include <cstring>

#include "graph/backend.h"
#include "graph/op.h"
#include "nn/compiler/programs.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

// A host copy of a tensor on any device.
Tensor host_copy(const Tensor& t) {
  if (t.device().kind == DeviceKind::cpu) return t.clone();
  Tensor out(t.shape(), t.dtype());
  graph::ExecContext ctx;
  ctx.device = t.device();
  graph::Backend& b = graph::backend(t.device().kind);
  b.copy_to_host(out.raw(), t.raw(), t.nbytes(), ctx);
  b.synchronize(ctx);
  return out;
}

// Copies host bytes into a tensor's existing storage (compiled programs hold pointers to it).
void copy_into(Tensor& dst, const Tensor& host_src) {
  if (dst.device().kind == DeviceKind::cpu) {
    std::memcpy(dst.raw(), host_src.raw(), host_src.nbytes());
    return;
  }
  graph::ExecContext ctx;
  ctx.device = dst.device();
  graph::Backend& b = graph::backend(dst.device().kind);
  b.copy_to_device(dst.raw(), host_src.raw(), host_src.nbytes(), ctx);
  b.synchronize(ctx);
}

}  // namespace

TrainingState Model::training_state() {
  check_compiled("training_state");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  TrainingState s;
  s.model_name = name_;
  for (const LayerPtr& l : layers_)
    for (const Weight& w : l->weights()) {
      s.weight_names.push_back(w.name);
      s.weights.push_back(host_copy(w.value));
    }
  s.optimizer = optimizer_->name();
  s.slots_per_variable = optimizer_->slots_per_variable();
  for (Weight* w : programs_->trainable_weights()) {
    const std::vector<Tensor>* slots = programs_->slots_of(*w, false);
    for (int k = 0; k < s.slots_per_variable; ++k)  // no step yet: the zeros a first step starts from
      s.optimizer_slots.push_back(slots ? host_copy((*slots)[static_cast<size_t>(k)])
                                        : Tensor(w->value.shape(), w->value.dtype()));
  }
  s.iterations = optimizer_->iterations();
  s.learning_rate = optimizer_->learning_rate();
  s.step = step_;
  s.position = position_;
  return s;
}

void Model::restore_training_state(const TrainingState& s) {
  check_compiled("restore_training_state");
  if (!has_graph_)
    throw InvalidArgument("restore_training_state: model '" + name_ +
                          "' is not built yet (give it an Input layer, or restore from a callback's on_train_begin)");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
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
  if (s.optimizer != optimizer_->name() || s.slots_per_variable != optimizer_->slots_per_variable())
    throw InvalidArgument(where + "the model is compiled with " + optimizer_->name() + " but the state holds " +
                          (s.optimizer.empty() ? std::string("no optimizer") : s.optimizer) +
                          " state (compile with the same optimizer)");
  const std::vector<Weight*> trainable = programs_->trainable_weights();
  const size_t per = static_cast<size_t>(s.slots_per_variable);
  if (s.optimizer_slots.size() != trainable.size() * per)
    throw InvalidArgument(where + "the state has " + std::to_string(s.optimizer_slots.size()) +
                          " optimizer slots, the model needs " + std::to_string(trainable.size() * per) + " (" +
                          std::to_string(trainable.size()) + " trainable weights; were layers frozen differently?)");
  for (size_t i = 0; i < trainable.size(); ++i)
    for (size_t k = 0; k < per; ++k) {
      const Tensor& t = s.optimizer_slots[i * per + k];
      if (t.shape() != trainable[i]->value.shape() || t.dtype() != trainable[i]->value.dtype())
        throw InvalidArgument(where + "optimizer slot " + std::to_string(k) + " of '" + trainable[i]->name + "' is " +
                              t.shape().to_string() + ", the weight is " + trainable[i]->value.shape().to_string());
    }
  if (s.iterations < 0 || s.position.epoch < 0 || s.position.batch < 0 || s.position.shuffles < 0 ||
      s.position.pass_offset < 0)
    throw InvalidArgument(where + "negative counters in the state (iterations " + std::to_string(s.iterations) +
                          ", epoch " + std::to_string(s.position.epoch) + ")");
  // Everything checked: now copy (nothing above changed the model).
  for (size_t i = 0; i < mine.size(); ++i) copy_into(mine[i]->value, s.weights[i]);
  for (size_t i = 0; i < trainable.size(); ++i) {
    std::vector<Tensor>& slots = *programs_->slots_of(*trainable[i], true);
    for (size_t k = 0; k < per; ++k) copy_into(slots[k], s.optimizer_slots[i * per + k]);
  }
  optimizer_->config().iterations = s.iterations;
  optimizer_->set_learning_rate(s.learning_rate);
  step_ = s.step;
  position_ = s.position;
  resume_ = s.position;
}

}  // namespace tk
