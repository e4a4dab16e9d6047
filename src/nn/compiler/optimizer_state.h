// The optimizer's state of one replica's programs, on its device: per weight its slots (Adam's moments), the
// optimizer-level variables (Nadam's u_product), dynamic loss scaling's state, and the micro-batch gradient
// accumulators. Compiled programs hold pointers into these tensors, so they are written in place, never replaced.
//
//   OptimizerState& st = programs.optimizer_state();
//   std::vector<Tensor>* s = st.slots_of(w, /*create=*/true);  // zeroed (Adagrad: 0.1) when new
//   if (const float* ls = st.loss_scale_state()) ...           // [scale, finite steps, skipped steps]
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "graph/graph.h"
#include "trainkit/nn/layer.h"
#include "trainkit/nn/optimizers.h"

namespace tk::nn {

class OptimizerState {
 public:
  // `synchronize` waits for the programs' queued work (which reads and writes the state) before the host touches it.
  OptimizerState(OptimizerPtr optimizer, Device device, std::function<void()> synchronize);

  // The slots of `w` (slots_per_variable tensors on the device); created at their initial values when `create` and
  // missing (restoring a state before the first step), else null when missing.
  std::vector<Tensor>* slots_of(const Weight& w, bool create);
  // As they are (shared), or null when none exist yet: what a streaming save writes. Call synchronize() first.
  const std::vector<Tensor>* live_slots(const Weight& w) const;
  // Host copies of a weight's slots (zeros when none exist yet).
  std::vector<Tensor> slots(const Weight& w) const;
  // Sets a weight's slots, in place when programs already hold them.
  void set_slots(const Weight& w, const std::vector<Tensor>& values);

  // The optimizer-level variables (nn/optimizer_rule.h), float32 scalars in the rule's order; created at their
  // initial values when `create` and missing, else null when missing (an empty list when the rule has none).
  std::vector<Tensor>* variables_of(bool create);
  std::vector<float> variables() const;  // the initial values before the first step
  void set_variables(const std::vector<float>& values);

  // Dynamic loss scaling's state [scale, finite steps since the scale last changed, skipped steps], or null before
  // the first training program (or without loss scaling); set_ creates it (restoring a state).
  const float* loss_scale_state() const;
  void set_loss_scale_state(float scale, float counter, float skipped);
  // Whether the step that just ran was skipped (a non-finite gradient under loss scaling).
  bool step_was_skipped();

  // In a graph being traced: the loss-scale state's Variable ((3) float32), and `w`'s gradient accumulator
  // (micro-batching). Placeholders when not allocating and missing (planning allocates nothing).
  int loss_scale_variable(graph::Graph& g, bool allocate);
  int accumulator(graph::Graph& g, const Weight& w, bool allocate);
  // The weights the accumulate program reaches (the apply program updates those).
  void reaches(const Weight& w) { has_gradient_.insert(w.id); }
  bool reached(const Weight& w) const { return has_gradient_.count(w.id) > 0; }

  // What a replica shares with the others, after its weights (ProgramCache::state_tensors): `trainable`'s slots,
  // the optimizer variables, the loss-scale state; each with a name.
  void append_state_tensors(const std::vector<Weight*>& trainable, std::vector<std::pair<std::string, Tensor*>>& out);
  // Slots, variables, loss scale and accumulators := `primary`'s (a replica starting a fit).
  void copy_from(const OptimizerState& primary, const std::vector<Weight*>& trainable);
  // Device bytes held (256-byte granules, as the allocator takes them).
  size_t bytes() const;

 private:
  OptimizerPtr optimizer_;
  Device device_;
  std::function<void()> synchronize_;
  std::map<uint64_t, std::vector<Tensor>> slots_;  // per Weight::id
  std::vector<Tensor> variables_;                  // () float32 each
  Tensor loss_scale_;                              // (3) float32
  mutable float loss_scale_host_[3] = {};          // loss_scale_state()'s host copy when loss_scale_ is on a device
  int64_t skipped_seen_ = 0;                       // skipped steps counted when step_was_skipped last looked
  std::map<uint64_t, Tensor> accumulators_;        // per Weight::id: micro-batch gradient sums
  std::set<uint64_t> has_gradient_;                // weights the accumulate program reaches
};

}  // namespace tk::nn
