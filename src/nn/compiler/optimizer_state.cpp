#include "nn/compiler/optimizer_state.h"

#include "core/device_bytes.h"
#include "nn/optimizer_rule.h"
#include "trainkit/core/error.h"

namespace tk::nn {

OptimizerState::OptimizerState(OptimizerPtr optimizer, Device device, std::function<void()> synchronize)
    : optimizer_(std::move(optimizer)), device_(device), synchronize_(std::move(synchronize)) {}

std::vector<Tensor>* OptimizerState::slots_of(const Weight& w, bool create) {
  auto found = slots_.find(w.id);
  if (found == slots_.end()) {
    if (!create) return nullptr;
    const Optimizer& opt = *optimizer_;
    std::vector<Tensor> fresh;
    for (int s = 0; s < opt.slots_per_variable(); ++s) {
      const Shape shape = slot_shape(opt, s, w.value.shape());  // Adafactor's factored moments differ
      fresh.emplace_back(shape, w.value.dtype(), device_, w.name + "/" + opt.name() + " slot " + std::to_string(s));
      if (const float init = slot_initial_value(opt, s); init != 0.0f) {  // Adagrad's accumulator: 0.1
        Tensor host = Tensor::full(shape, init);
        device_copy(fresh.back().raw(), fresh.back().device(), host.raw(), Device::cpu(), host.nbytes());
      }
    }
    found = slots_.emplace(w.id, std::move(fresh)).first;
  }
  return &found->second;
}

const std::vector<Tensor>* OptimizerState::live_slots(const Weight& w) const {
  auto it = slots_.find(w.id);
  return it == slots_.end() ? nullptr : &it->second;
}

std::vector<Tensor> OptimizerState::slots(const Weight& w) const {
  const int n = optimizer_->slots_per_variable();
  std::vector<Tensor> out;
  synchronize_();
  auto it = slots_.find(w.id);
  for (int s = 0; s < n; ++s)  // zeros until the slots exist, else a host copy from any device
    out.push_back(it == slots_.end() ? Tensor::zeros(slot_shape(*optimizer_, s, w.value.shape()), w.value.dtype())
                                     : it->second[static_cast<size_t>(s)].to_device(Device::cpu()));
  return out;
}

void OptimizerState::set_slots(const Weight& w, const std::vector<Tensor>& values) {
  synchronize_();  // the programs' queued work reads and writes them
  std::vector<Tensor>& slots = *slots_of(w, true);
  for (size_t s = 0; s < values.size(); ++s) {  // in place: compiled programs hold pointers to the storage
    Tensor& dst = slots[s];
    device_copy(dst.raw(), dst.device(), values[s].raw(), values[s].device(), dst.nbytes());
  }
}

std::vector<Tensor>* OptimizerState::variables_of(bool create) {
  if (variables_.empty() && create) {
    const std::vector<float> init = optimizer_variable_initial_values(*optimizer_);
    for (const float v : init) {
      variables_.emplace_back(Shape{}, DType::f32, device_, "optimizer variable");
      device_copy(variables_.back().raw(), variables_.back().device(), &v, Device::cpu(), sizeof v);
    }
  }
  return variables_.empty() && !optimizer_variable_initial_values(*optimizer_).empty() ? nullptr : &variables_;
}

std::vector<float> OptimizerState::variables() const {
  if (variables_.empty()) return optimizer_variable_initial_values(*optimizer_);
  synchronize_();
  std::vector<float> out(variables_.size());
  for (size_t i = 0; i < out.size(); ++i)
    device_copy(&out[i], Device::cpu(), variables_[i].raw(), variables_[i].device(), sizeof(float));
  return out;
}

void OptimizerState::set_variables(const std::vector<float>& values) {
  std::vector<Tensor>& vars = *variables_of(true);
  if (values.size() != vars.size())
    throw InvalidArgument(optimizer_->name() + " keeps " + std::to_string(vars.size()) +
                          " optimizer variable(s), got " + std::to_string(values.size()));
  synchronize_();  // in place: compiled programs hold pointers to the storage
  for (size_t i = 0; i < vars.size(); ++i)
    device_copy(vars[i].raw(), vars[i].device(), &values[i], Device::cpu(), sizeof(float));
}

int OptimizerState::loss_scale_variable(graph::Graph& g, bool allocate) {
  const char* name = "optimizer/loss_scale";
  if (allocate && !loss_scale_.defined()) {
    loss_scale_ = Tensor(Shape{3}, DType::f32, device_, name);
    const float init[3] = {optimizer_->config().loss_scale_initial, 0.0f, 0.0f};
    device_copy(loss_scale_.raw(), loss_scale_.device(), init, Device::cpu(), sizeof init);
  }
  return loss_scale_.defined() ? g.variable(name, loss_scale_) : g.placeholder_variable(name, Shape{3}, DType::f32);
}

const float* OptimizerState::loss_scale_state() const {
  if (!loss_scale_.defined()) return nullptr;
  if (loss_scale_.on_host()) return static_cast<const float*>(loss_scale_.raw());
  // On a device: a host copy (synchronizes with the step that wrote it).
  synchronize_();
  device_copy(loss_scale_host_, Device::cpu(), loss_scale_.raw(), loss_scale_.device(), sizeof loss_scale_host_);
  return loss_scale_host_;
}

void OptimizerState::set_loss_scale_state(float scale, float counter, float skipped) {
  if (!loss_scale_.defined()) loss_scale_ = Tensor(Shape{3}, DType::f32, device_, "optimizer/loss_scale");
  const float v[3] = {scale, counter, skipped};
  synchronize_();
  device_copy(loss_scale_.raw(), loss_scale_.device(), v, Device::cpu(), sizeof v);
  skipped_seen_ = static_cast<int64_t>(skipped);
}

bool OptimizerState::step_was_skipped() {
  const float* st = loss_scale_state();
  if (!st) return false;
  const auto skipped = static_cast<int64_t>(st[2]);
  const bool was = skipped != skipped_seen_;
  skipped_seen_ = skipped;
  return was;
}

int OptimizerState::accumulator(graph::Graph& g, const Weight& w, bool allocate) {
  const std::string name = w.name + "/gradient accumulator";
  auto found = accumulators_.find(w.id);
  if (allocate && found == accumulators_.end())
    found = accumulators_.emplace(w.id, Tensor(w.value.shape(), w.value.dtype(), device_, name)).first;
  return found != accumulators_.end() ? g.variable(name, found->second)
                                      : g.placeholder_variable(name, w.value.shape(), w.value.dtype());
}

void OptimizerState::append_state_tensors(const std::vector<Weight*>& trainable,
                                          std::vector<std::pair<std::string, Tensor*>>& out) {
  for (Weight* w : trainable)
    if (std::vector<Tensor>* slots = slots_of(*w, false))
      for (size_t k = 0; k < slots->size(); ++k) out.emplace_back(w->name + "/slot" + std::to_string(k), &(*slots)[k]);
  const auto& rule_vars = rule_state(*optimizer_).rule->variables;
  for (size_t i = 0; i < variables_.size(); ++i) out.emplace_back("optimizer/" + rule_vars[i].name, &variables_[i]);
  if (loss_scale_.defined()) out.emplace_back("optimizer/loss_scale", &loss_scale_);
}

void OptimizerState::copy_from(const OptimizerState& primary, const std::vector<Weight*>& trainable) {
  for (Weight* w : trainable)
    if (const std::vector<Tensor>* theirs = primary.live_slots(*w)) set_slots(*w, *theirs);
  if (!primary.variables_.empty()) set_variables(primary.variables());
  if (const float* st = primary.loss_scale_state()) set_loss_scale_state(st[0], st[1], st[2]);
}

size_t OptimizerState::bytes() const {
  size_t bytes = 0;
  for (const auto& [w, acc] : accumulators_) bytes += allocated_bytes(acc.nbytes());
  if (loss_scale_.defined()) bytes += 256;
  for (const auto& [w, slots] : slots_)
    for (const Tensor& t : slots) bytes += allocated_bytes(t.nbytes());
  bytes += variables_.size() * 256;
  return bytes;
}

}  // namespace tk::nn
