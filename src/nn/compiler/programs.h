// Compiles a Model into programs (one per kind and batch size) and keeps the optimizer slots.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "nn/compiler/device_mirrors.h"
#include "nn/compiler/log_stats.h"
#include "nn/compiler/optimizer_state.h"
#include "nn/training/trainer.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// accumulate: forward + backward adding the gradients into accumulators (micro-batching);
// apply: one optimizer step from the accumulators.
enum class ProgramKind { train, eval, predict, accumulate, apply };

// x * scale + offset applied while a batch is staged (a Rescaling layer fused into staging).
struct StageScale {
  float scale = 1.0f, offset = 0.0f;
};

struct Compiled {
  std::unique_ptr<graph::Program> program;
  std::vector<int> x, y;  // input value ids: model inputs, targets (then the sample weights, in a weighted program)
  std::vector<StageScale> x_scale;                            // per model input
  std::vector<char> x_conversion_seen;                        // per model input: staging has looked at its source dtype
  std::shared_ptr<std::set<std::string>> conversions_logged;  // shared by a model's programs
  std::vector<int> outputs;                                   // predictions (predict programs)
  std::vector<std::pair<std::string, int>> logs;              // log name -> value id ("loss" first)
  std::vector<LogStat> log_stats;                             // per log: how it combines over an epoch
  std::shared_ptr<graph::InputStaging> staging;  // its backend's input staging, when it has one (first bind)
  bool staging_asked = false;                    // the backend was asked for it
  std::shared_ptr<graph::RowGather> gather;      // its batches of a device-resident Dataset (first bind)
  bool step_controlled = false;  // built while the optimizer asked for a StepControl node (ProgramCache::get)
};

// One replica's programs (the model's own: replica 0) and what they share: one arena and compute stream, the
// optimizer's state (OptimizerState) and the device copies of the weights they train (DeviceMirrors). Reads what it
// needs of the model through its public API (layers, inputs/outputs, losses, optimizer, device); one trace per
// program build.
class ProgramCache {
 public:
  // replica > 0: the programs of that replica of a model compiled under a MirroredStrategy, on the strategy's
  // replica-th device, with copies of the weights there (nn/distribute/). Under a strategy with more than one
  // replica, training programs all-reduce their gradients (AllReduce ops) before the update.
  // Made by the model's nn::Trainer (one per replica), which it reads for the strategy and the memory budget.
  ProgramCache(Trainer& trainer, Model& m, int replica = 0);
  ~ProgramCache();  // waits for its compute stream before its device memory is given back
  Compiled& get(ProgramKind kind, int64_t batch);
  Device device() const { return device_; }
  // A replica's copies of the weights, optimizer slots and loss-scale state := the primary's (replica 0's, the
  // model's own weights): when fit or train_on_batch starts (Keras broadcasts the initial values the same way).
  void sync_from(const ProgramCache& primary);
  // Everything a replica must share with the others, in a fixed order: every layer's weights (this replica's
  // storage), the optimizer slots of the trainable ones that have them, the optimizer variables, the loss-scale state.
  // With each, a name.
  std::vector<std::pair<std::string, Tensor*>> state_tensors();
  // The device copies of the weights (a replica > 0, a GPU): upload / download / mark_trained (fit, evaluate,
  // predict and train_on_batch upload first, so set_weights / load_weights between calls count).
  DeviceMirrors& mirrors() { return *mirrors_; }
  const DeviceMirrors& mirrors() const { return *mirrors_; }
  // The optimizer's slots and variables, loss scaling's state, the micro-batch accumulators.
  OptimizerState& optimizer_state() { return *state_; }
  const OptimizerState& optimizer_state() const { return *state_; }
  // The stream this cache's programs run on (its backend's, graph::Backend::make_stream, made with the first program
  // on a device with streams; null on the cpu), and a wait for it: every copy of this cache between host and device
  // memory the programs use waits for it first.
  void* stream() const;
  void synchronize() const;
  // Weights the optimizer updates: trainable weights of trainable layers, in layer order.
  std::vector<Weight*> trainable_weights() const;

  // The graph of a program without compiling it. With allocate_slots false, missing optimizer slots are
  // placeholders, so planning allocates nothing.
  struct Traced {
    graph::Graph g;
    std::vector<int> keep, sinks;
    std::unique_ptr<Compiled> compiled;  // metadata only (program not built)
  };
  // remat: rematerialize the backward pass (stats filled in when non-null).
  // fuse: run the epilogue fusion pass (graph/fuse.h) unless TK_FUSE=0; exporters trace unfused graphs.
  Traced trace(ProgramKind kind, int64_t batch, bool allocate_slots, bool remat = false,
               graph::RematStats* stats = nullptr, bool fuse = true);
  // The programs built so far (their graphs), e.g. for the kernel choices a training state records.
  std::vector<const graph::Program*> programs() const;
  // Bytes this cache holds on the device: optimizer slots and the shared arena.
  size_t persistent_bytes() const;
  // persistent_bytes and this cache's copies of the weights (a replica > 0, a GPU): all it holds on its device.
  size_t held_bytes() const;
  // Whether the training programs scale the loss (dynamic loss scaling: set, or automatic for float16 compute).
  bool scales_loss() const;

 private:
  std::unique_ptr<Compiled> build(ProgramKind kind, int64_t batch);
  // control >= 0: the update is gated on the step's StepControl (global_clipnorm, skipping non-finite steps).
  // Appends the update's sinks: one fused update op, or an optimizer rule's Assigns (nn/optimizer_rule.h).
  void add_update(graph::Graph& g, const Weight& w, int var, int grad, bool zero_grad, bool allocate_slots, int control,
                  std::vector<int>& sinks);
  // Keras' constraint of `w` (its layer's <key>_constraint), as a Constrain node after its update; none: nothing.
  void add_constraint(graph::Graph& g, const Weight& w, int var, std::vector<int>& sinks);
  // The StepControl over a step's gradients when the optimizer needs one (else -1).
  int step_control(graph::Graph& g, const std::vector<int>& grads, bool allocate);
  // Whether the optimizer's config asks for a StepControl node now (global_clipnorm, skip_nonfinite, loss scaling).
  bool wants_step_control() const;
  // Turns the optimizer's dynamic loss scaling on when the model computes in float16 and auto_scale_loss is set
  // (Keras' compile(auto_scale_loss=True)); true when loss scaling is on.
  bool enable_loss_scaling();
  // Data parallel: the values holding `grads` (weights[i]'s gradient, or -1) summed over the replicas, in buckets
  // (graph/bucket.h); `grads` itself without a collective.
  std::vector<int> all_reduce(graph::Graph& g, const std::vector<int>& grads, const std::vector<Weight*>& weights,
                              bool zero_inputs);
  std::string arena_owner() const;  // the model's name, and the replica's when not 0
  // The sample weights' input of a program of this kind now (Trainer::sample_weight_key; 0 for predict and apply).
  int64_t weight_key(ProgramKind kind) const;
  // Program cache key: (kind, batch, device, sample weights). A cache belongs to one replica.
  struct Key {
    int kind;
    int64_t batch;
    DeviceKind device_kind;
    int device_index;
    int64_t weights;  // weight_key: a program with a sample-weight input is another program
    auto operator<=>(const Key&) const = default;
  };
  Trainer& trainer_;
  Model& model_;            // read through its public API
  OptimizerPtr optimizer_;  // the model's when the cache was made (compile() makes new caches); null before compile
  int replica_ = 0;
  Device device_;  // the replica's device (the model's for replica 0)
  // The programs' compute stream (a device with streams), declared before everything its kernels use so it outlives
  // them.
  std::shared_ptr<graph::Stream> stream_;
  graph::Collective* collective_ = nullptr;  // the strategy's replicas' group when there is more than one replica
  size_t bytes_per_pack_ = 0;                // its gradient buckets' size
  bool overlap_ = false;                     // and whether their all-reduces overlap the backward pass
  std::map<Key, std::unique_ptr<Compiled>> cache_;
  std::unique_ptr<OptimizerState> state_;
  std::unique_ptr<DeviceMirrors> mirrors_;
  Tensor arena_;  // shared by every program of the model
  std::shared_ptr<std::set<std::string>> conversions_logged_ = std::make_shared<std::set<std::string>>();
};

// The memory a traced training program needs, attributed to layers (memory_plan.cpp).
MemoryPlan plan_from_trace(const ProgramCache::Traced& t, const std::vector<LayerPtr>& layers, Device device,
                           int64_t batch, bool remat, const graph::RematStats& stats);
// Folds Rescaling (Scale ops reading a model input) into staging: fills c.x_scale, rewires the readers.
void fuse_input_scaling(graph::Graph& g, Compiled& c, const std::vector<int>& keep);

}  // namespace tk::nn
