// nn::Trainer: made with its model, started over by compile(); the program caches of the model and its replicas.
#include "nn/training/trainer.h"

#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"

namespace tk::nn {

Trainer::Trainer(Model& model) : model_(model) { caches_.push_back(std::make_unique<ProgramCache>(*this, model_)); }

Trainer::~Trainer() = default;

void Trainer::reset(std::shared_ptr<::tk::distribute::StrategyState> strategy, size_t absent_device_budget) {
  sync_host_weights();  // a model on a GPU: its trained weights are the device's copies, which go with the caches
  // Replicas first: their compute streams go before the primary's (each cache waits for its own in its destructor).
  while (caches_.size() > 1) caches_.pop_back();
  caches_.clear();
  strategy_ = std::move(strategy);
  absent_device_budget_ = absent_device_budget;
  run_policies_.clear();
  replicas_synced = false;
  caches_.push_back(std::make_unique<ProgramCache>(*this, model_));
}

ProgramCache& Trainer::programs(int replica) {
  while (static_cast<int>(caches_.size()) <= replica)  // ProgramCache checks the strategy has that replica
    caches_.push_back(std::make_unique<ProgramCache>(*this, model_, static_cast<int>(caches_.size())));
  return *caches_[static_cast<size_t>(replica)];
}

bool Trainer::replicated() const { return strategy_ && strategy_->replicated(); }

void Trainer::sync_host_weights() { caches_[0]->mirrors().download(); }

void Trainer::weights_changed_on_host() { caches_[0]->mirrors().upload(/*force=*/true); }

void Trainer::add_loss_scale_logs(Logs& logs) const {
  const float* st = caches_[0]->optimizer_state().loss_scale_state();
  if (!st) return;
  logs.set("loss_scale", st[0]);
  logs.set("skipped_steps", st[2]);
}

}  // namespace tk::nn
