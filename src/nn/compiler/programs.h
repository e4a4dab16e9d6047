// Compiles a Model into programs (one per kind and batch size) and keeps the optimizer slots.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "nn/compiler/log_stats.h"
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
  std::vector<int> x, y;                                      // input value ids: model inputs, targets
  std::vector<DType> y_dtype;                                 // i32 for sparse targets
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

// The model's programs and the state they share (optimizer slots, gradient accumulators, one arena). Reads
// what it needs of the model (layers, inputs/outputs, losses, optimizer, device) but never calls back
// into its public API: one trace per program build.
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
  // The storage this cache's programs read for `w`: its copy when it has one (a replica > 0, a GPU), else the model's
  // weight.
  const Tensor& current_value(const Weight& w) const;
  // Everything a replica must share with the others, in a fixed order: every layer's weights (this replica's
  // storage), the optimizer slots of the trainable ones that have them, the loss-scale state. With each, a name.
  std::vector<std::pair<std::string, Tensor*>> state_tensors();
  // A model on a device the host cannot address (cuda): its programs run on device copies of the weights (made when
  // first needed). upload_weights copies the model's weights there (fit, evaluate, predict and train_on_batch call it
  // first, so set_weights / load_weights between calls count) unless the device copies are ahead of them (trained
  // since the last download_weights); download_weights brings the model's weights up to date (after each epoch and
  // train_on_batch). No-ops on the cpu and for replicas > 0 (sync_from).
  void upload_weights(bool force = false);  // force: even over device copies trained since (the host's are newer)
  void download_weights();
  void mark_trained() { device_ahead_ = mirrors_weights() && replica_ == 0; }
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
  // The optimizer slots of `w` (slots_per_variable tensors on the model's device); created zeroed when
  // `create` and missing (restoring a state before the first step), else null when missing.
  std::vector<Tensor>* slots_of(const Weight& w, bool create);
  // A weight's optimizer slots as they are (shared, on this cache's device), or null when none exist yet: what a
  // streaming save writes (io/slot_views.cpp). Call synchronize() first.
  const std::vector<Tensor>* live_slots(const Weight& w) const {
    auto it = slots_.find(w.id);
    return it == slots_.end() ? nullptr : &it->second;
  }
  // Copies of a weight's optimizer slots (zeros when none exist yet).
  std::vector<Tensor> slots(const Weight& w) const;
  // Sets a weight's optimizer slots, in place when programs already hold them.
  void set_slots(const Weight& w, const std::vector<Tensor>& values);
  // The optimizer-level variables (nn/optimizer_rule.h: Nadam's u_product), float32 scalars on the model's device in
  // the rule's order; created at their initial values when `create` and missing, else null when missing.
  std::vector<Tensor>* optimizer_variables_of(bool create);
  // Their values (the initial values before the first step), and setting them (restoring a state).
  std::vector<float> optimizer_variables() const;
  void set_optimizer_variables(const std::vector<float>& values);
  // The programs built so far (their graphs), e.g. for the kernel choices a training state records.
  std::vector<const graph::Program*> programs() const;
  // Bytes this cache holds on the device: optimizer slots and the shared arena.
  size_t persistent_bytes() const;
  // persistent_bytes and this cache's copies of the weights (a replica > 0, a GPU): all it holds on its device.
  size_t held_bytes() const;
  // Dynamic loss scaling's state [scale, finite steps since the scale last changed, skipped steps], or null
  // before the first training program (or without loss scaling); set_ creates it (restoring a state).
  const float* loss_scale_state() const;
  void set_loss_scale_state(float scale, float counter, float skipped);
  // Whether the training programs scale the loss (dynamic loss scaling: set, or automatic for float16 compute).
  bool scales_loss() const;
  // Whether the step that just ran was skipped (a non-finite gradient under loss scaling).
  bool step_was_skipped();

 private:
  std::unique_ptr<Compiled> build(ProgramKind kind, int64_t batch);
  int accumulator(graph::Graph& g, const Weight& w, bool allocate);
  // control >= 0: the update is gated on the step's StepControl (global_clipnorm, skipping non-finite steps).
  // Appends the update's sinks: one fused update op, or an optimizer rule's Assigns (nn/optimizer_rule.h).
  void add_update(graph::Graph& g, const Weight& w, int var, int grad, bool zero_grad, bool allocate_slots, int control,
                  std::vector<int>& sinks);
  // The StepControl over a step's gradients when the optimizer needs one (else -1).
  int step_control(graph::Graph& g, const std::vector<int>& grads, bool allocate);
  // Whether the optimizer's config asks for a StepControl node now (global_clipnorm, skip_nonfinite, loss scaling).
  bool wants_step_control() const;
  // Turns the optimizer's dynamic loss scaling on when the model computes in float16 and auto_scale_loss is set
  // (Keras' compile(auto_scale_loss=True)); true when loss scaling is on.
  bool enable_loss_scaling();
  // The loss-scale state's Variable: [scale, finite steps since the last change, skipped steps], float32 (3).
  int loss_scale_variable(graph::Graph& g, bool allocate);
  // Where a weight lives for this replica's programs: the weight itself on replica 0 on the cpu, else this replica's
  // copy (created on its device when `allocate`; null when missing and not allocating).
  Tensor* weight_storage(const Weight& w, bool allocate);
  bool mirrors_weights() const;  // replica > 0, or a device the host cannot address
  // Every weight's copy := the model's weight (to_mirrors), or the other way; copies made first when `allocate`.
  void copy_weights(bool to_mirrors, bool allocate);
  // Data parallel: the values holding `grads` (weights[i]'s gradient, or -1) summed over the replicas, in buckets
  // (graph/bucket.h); `grads` itself without a collective.
  std::vector<int> all_reduce(graph::Graph& g, const std::vector<int>& grads, const std::vector<Weight*>& weights,
                              bool zero_inputs);
  std::string arena_owner() const;  // the model's name, and the replica's when not 0
  // Program cache key: (kind, batch, device). A cache belongs to one replica.
  struct Key {
    int kind;
    int64_t batch;
    DeviceKind device_kind;
    int device_index;
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
  std::map<uint64_t, Tensor> mirrors_;       // per Weight::id, this replica's copy (mirrors_weights())
  bool device_ahead_ = false;                // the copies were trained since the model's weights were last updated
  std::map<Key, std::unique_ptr<Compiled>> cache_;
  std::map<uint64_t, std::vector<Tensor>> slots_;  // per Weight::id: optimizer slots
  Tensor arena_;                                   // shared by every program of the model
  Tensor loss_scale_;                              // (3) float32: dynamic loss scaling's state
  std::vector<Tensor> optimizer_variables_;        // the optimizer rule's variables (Nadam's u_product), () each
  int64_t skipped_seen_ = 0;                       // skipped steps counted when step_was_skipped last looked
  mutable float loss_scale_host_[3] = {};          // loss_scale_state()'s host copy when loss_scale_ is on a device
  std::map<uint64_t, Tensor> accumulators_;        // per Weight::id: micro-batch gradient sums
  std::set<uint64_t> has_gradient_;                // weights the accumulate program reaches
  std::shared_ptr<std::set<std::string>> conversions_logged_ = std::make_shared<std::set<std::string>>();
};

// The memory a traced training program needs, attributed to layers (memory_plan.cpp).
MemoryPlan plan_from_trace(const ProgramCache::Traced& t, const std::vector<LayerPtr>& layers, Device device,
                           int64_t batch, bool remat, const graph::RematStats& stats);
// Folds Rescaling (Scale ops reading a model input) into staging: fills c.x_scale, rewires the readers.
void fuse_input_scaling(graph::Graph& g, Compiled& c, const std::vector<int>& keep);

}  // namespace tk::nn
