// Models: Sequential and functional (DAGs with several inputs and outputs), with Keras' compile /
// fit / evaluate / predict / summary.
//
//   tk::utils::set_random_seed(42);
//   tk::Sequential model({tk::layers::Input({784}), tk::layers::Dense(256, "relu"), tk::layers::Dense(10)});
//   model.compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
//                 {"accuracy"});
//   tk::History h = model.fit(x_train, y_train, {.batch_size = 128, .epochs = 10, .validation_split = 0.1});
//   tk::Logs test = model.evaluate(x_test, y_test);
//   tk::Tensor logits = model.predict(x_test);
//
// Keras' sample and class weights (the loss only: compile's metrics are not weighted, as in Keras 3):
//   model.fit(x, y, {.sample_weight = w});                      // w: (rows,) one weight per row
//   model.fit(x, y, {.class_weight = {{0, 1.0f}, {1, 5.0f}}});  // each row weighted by its class
//   model.evaluate(x, y, {.sample_weight = w});
// A Dataset whose elements are (x..., y..., w) is weighted the same way.
//
// Where and how it runs: model.set_device(tk::Device::cpu()) and model.set_dtype_policy("float32") (Keras'
// policy names; "mixed_float16" / "mixed_bfloat16" arrive with mixed precision), before the first
// fit/evaluate/predict. Data of any dtype (uint8 images, float16 features) stays in its dtype in memory and
// is converted batch by batch as it is staged into the program.
#pragma once
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/data/dataset.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/losses.h"
#include "trainkit/nn/memory_plan.h"
#include "trainkit/nn/metrics.h"
#include "trainkit/nn/optimizers.h"
#include "trainkit/nn/training_state.h"

namespace tk {

namespace nn {
class Trainer;
}  // namespace nn
namespace distribute {
struct StrategyState;
}  // namespace distribute

// batch_size = kAutoBatchSize: the largest batch (up to auto_batch_cap and the sample count) whose memory
// plan fits the device budget with a 5% margin, chosen from the plan without trial runs. Under a strategy with R
// replicas in sync: R x the largest batch that fits every replica's own device budget (Model::auto_batch_size).
// micro_batch_size = kAutoBatchSize: keep batch_size but split each batch into the largest micro-batches
// that fit, accumulating gradients (the same update up to float rounding); under a strategy, per replica.
inline constexpr int64_t kAutoBatchSize = -1;

// Rematerialization: recompute forward activations during backward instead of keeping them
// (sqrt(n) checkpoints, Chen et al. 2016). automatic: only when the plain plan does not fit the budget.
enum class Remat { off, on, automatic };

struct FitOptions {
  int64_t batch_size = 32;  // or kAutoBatchSize
  int epochs = 1;
  int verbose = -1;  // -1 "auto": a progress bar on a terminal, one line per epoch otherwise; 0 silent
  std::vector<CallbackPtr> callbacks = {};
  float validation_split = 0.0f;  // the last fraction of x/y, taken before shuffling (as Keras)
  std::optional<std::pair<std::vector<Tensor>, std::vector<Tensor>>> validation_data = std::nullopt;
  bool shuffle = true;
  int initial_epoch = 0;
  int64_t steps_per_epoch = 0;    // 0: one pass over the data
  int64_t validation_steps = 0;   // 0: one pass over the validation data
  uint64_t seed = 0;              // 0: from tk::utils::set_random_seed
  int64_t auto_batch_cap = 1024;  // upper bound for kAutoBatchSize
  int64_t micro_batch_size = 0;   // 0: off; n: gradient accumulation over micro-batches of n; or kAutoBatchSize
  // Validation from a Dataset of (x..., y...) batches (with fit(Dataset); validation_data takes arrays).
  std::optional<data::Dataset> validation_dataset = std::nullopt;
  // Keras' sample_weight: a host array of one weight per row of x, (rows,) or (rows, 1), or per time step of a sequence
  // output, (rows, steps) (the output's shape without its last axis; one output). Each position's loss is multiplied by
  // its weight and the batch's loss is their sum over the count of positions (Keras' "sum_over_batch_size": not over
  // the sum of the weights). Negative and NaN weights are taken as given, as Keras does. With validation_split, the
  // last fraction of the weights weights the validation loss.
  std::optional<Tensor> sample_weight = std::nullopt;
  // Keras' class_weight: class id -> weight; a row's weight is that of its class (its integer id, the argmax of a
  // one-hot target, or the rounded value of a single binary target), 1 for a class not listed. fit only, one output,
  // not together with sample_weight (Keras' rules). A class id outside the output's classes is an InvalidArgument.
  std::map<int, float> class_weight = {};
  // The weights of validation_data's rows (Keras' validation_data=(x, y, sample_weight)).
  std::optional<Tensor> validation_sample_weight = std::nullopt;
};

struct EvaluateOptions {
  int64_t batch_size = 32;
  int verbose = 0;
  int64_t steps = 0;  // 0: all data
  // Keras' sample_weight (FitOptions::sample_weight): weights the loss; the metrics are not weighted.
  std::optional<Tensor> sample_weight = std::nullopt;
};

class Model {
 public:
  Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name = {});
  Model(const KerasTensor& input, const KerasTensor& output, std::string name = {})
      : Model(std::vector<KerasTensor>{input}, std::vector<KerasTensor>{output}, std::move(name)) {}
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // One loss for every output, or one per output. Metrics apply to every output.
  void compile(OptimizerPtr optimizer, Loss loss, std::vector<Metric> metrics = {});
  void compile(OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics = {});

  History fit(const Tensor& x, const Tensor& y, FitOptions options = {});
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y, FitOptions options = {});
  Logs evaluate(const Tensor& x, const Tensor& y, EvaluateOptions options = {});
  Logs evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y, EvaluateOptions options = {});
  // From a Dataset whose elements are batches (x..., y...): the model's inputs first, then one target per
  // output (Keras' (x, y) convention), and optionally one more: the rows' sample weights (Keras' (x, y, sample_weight);
  // FitOptions::sample_weight's shapes). batch_size, shuffle and validation_split do not apply: the dataset
  // batches and shuffles. The next batch is staged while the current step runs (a prefetch is added when
  // the pipeline does not end with one), and every epoch reports how long the step waited for input
  // (logs "input_wait_fraction", "input_wait_p50_ms", "input_wait_p99_ms", and advice when input-bound).
  History fit(const data::Dataset& dataset, FitOptions options = {});
  Logs evaluate(const data::Dataset& dataset, EvaluateOptions options = {});
  // Elements may carry targets after the inputs; they are ignored.
  std::vector<Tensor> predict(const data::Dataset& dataset);
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  std::vector<Tensor> predict(const std::vector<Tensor>& x, int64_t batch_size = 32);
  // One optimizer step on exactly this batch; the returned logs are this batch's loss and metrics.
  // After the first call for a batch size it allocates nothing.
  const Logs& train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y);
  // The same with Keras' sample_weight for the batch's rows (FitOptions::sample_weight's shapes).
  const Logs& train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const Tensor& sample_weight);

  void summary(std::ostream& os = std::cout) const;
  // The inference program as an ONNX model (IR 8, opset 17, the batch axis dynamic, tensors channels_last as
  // here), written atomically; Unsupported names the first op it cannot express. Builds the model if needed.
  void export_onnx(const std::string& path);
  // Bytes a training step with this batch size takes (weights, optimizer state, arena, workspace), per
  // layer; computed from the compiled program's memory plan without allocating it. Requires compile().
  MemoryPlan memory_plan(int64_t batch_size);
  // The largest batch size (up to `cap`) whose plan fits in `available` bytes; 0 if none does.
  int64_t largest_batch_that_fits(size_t available, int64_t cap = 1 << 16);
  // Bytes a training step may use now: 95% of the budget, less what others hold reserved (this model's
  // own weights, optimizer state and arena count as available: the plan includes them).
  size_t memory_available_for_training() const;
  // What fit(batch_size = kAutoBatchSize) picks, up to `cap` rows: the largest batch whose plan fits
  // memory_available_for_training(). Under a strategy with R replicas in sync each replica runs batch / R rows on its
  // own device: R x the largest batch (up to cap / R) that fits every replica's own budget (the tightest replica
  // decides; under MultiWorkerMirroredStrategy the smallest over the ranks, so every rank gets the same batch).
  // `report`: prints "batch_size auto: ..." (rank 0 alone under MPI). OutOfMemoryError ("<what>: not even a batch of 1
  // fits ...", naming the replica's device and budget) when nothing fits.
  int64_t auto_batch_size(int64_t cap, bool report, const std::string& what = "fit: batch_size auto");
  // What fit(micro_batch_size = kAutoBatchSize) picks for a batch of `batch`: the largest micro-batch whose plan fits
  // beside the gradient accumulators. Under a strategy: per replica (up to its share of the batch, on its own
  // budget), the smallest over the replicas and ranks.
  int64_t auto_micro_batch_size(int64_t batch, bool report, const std::string& what = "fit: micro_batch_size auto");
  // Plans for a device this process does not have, e.g. a GPU on a laptop (`trainkit plan --device cuda
  // --memory-limit 24GiB`): memory_plan and largest_batch_that_fits trace and plan the programs for `device` (its
  // kernels' workspaces, its dtype sizes) under a budget of `budget` bytes that nobody else holds. Nothing is
  // allocated or run there: building a program for it is the usual Unsupported (fit, evaluate, predict).
  void plan_for_absent_device(Device device, size_t budget);
  std::string name() const { return name_; }
  const std::vector<LayerPtr>& layers() const { return layers_; }
  LayerPtr get_layer(const std::string& name) const;
  // The models this one calls like layers (tk::call_model), each once, in Keras' layer order: their layers are
  // among layers(), contiguous, where Keras lists the nested model. And the model `layer` belongs to when it is one
  // of theirs (null: this model's own layer).
  const std::vector<std::shared_ptr<const Model>>& nested_models() const { return nested_models_; }
  const Model* nested_model_of(const Layer& layer) const;
  std::vector<Tensor> get_weights() const;               // copies, in layer order
  void set_weights(const std::vector<Tensor>& weights);  // shapes must match get_weights()
  int64_t count_params() const;
  const std::vector<KerasTensor>& inputs() const { return inputs_; }
  const std::vector<KerasTensor>& outputs() const { return outputs_; }
  const std::vector<Loss>& losses() const { return losses_; }  // empty until compile()
  const std::vector<Metric>& metrics() const { return metrics_; }
  // Weights the optimizer updates: trainable weights of trainable layers, in layer order (Keras'
  // model.trainable_variables).
  std::vector<const Weight*> trainable_weights() const;
  // The optimizer's state for checkpoints: per trainable weight, optimizer()->slots_per_variable() tensors
  // (copies; zeros before the first step). Requires compile().
  std::vector<std::vector<Tensor>> get_optimizer_slots() const;
  // Restores what get_optimizer_slots() returned (and the optimizer's iteration count), so the next step
  // continues exactly. Shapes must match; InvalidArgument otherwise.
  void set_optimizer_slots(const std::vector<std::vector<Tensor>>& slots, int64_t iterations);
  // The optimizer's own variables, beside the per-weight slots (Nadam's u_product: Keras' optimizer-level
  // variables), float32 scalars in the optimizer's order; their initial values before the first step.
  std::vector<float> get_optimizer_variables() const;
  void set_optimizer_variables(const std::vector<float>& values);

  // Keras 3 files (src/io/keras*.cpp; tk::models::load_model reads them back):
  // save("m.keras"): the zip of config.json, metadata.json and model.weights.h5 with the compile config and
  // the optimizer state. save_weights/load_weights("x.weights.h5"): the weights alone, in Keras 3's layout;
  // load_weights also reads ".keras" archives and legacy Keras 2 ".h5" files. Files are written atomically.
  void save(const std::string& path) const;
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path);

  bool stop_training = false;                  // a callback sets it to end fit after the current epoch
  Remat rematerialization = Remat::automatic;  // takes effect for programs compiled afterwards
  OptimizerPtr optimizer() const { return optimizer_; }

  // Weights, optimizer state, counters and the data position of the fit in progress (or of the last one):
  // what BackupAndRestore saves. Callbacks may call it from on_train_batch_end / on_epoch_end.
  TrainingState training_state();
  // The same without copies: the weights and optimizer slots as they are (the slots in the model's device memory),
  // valid until the next training step. What BackupAndRestore writes (io::save_training_state streams each tensor),
  // so a backup needs no copy of the model's state.
  TrainingState training_state_view();
  // Puts a saved state back: weights and optimizer state are copied in, and the next fit (or the one in
  // progress, when called from a callback's on_train_begin) continues at state.position. The model must be
  // built and compiled with the same layers and optimizer; InvalidArgument names what differs.
  void restore_training_state(const TrainingState& state);

  // The device programs run on (default cpu:0). Unsupported when this build has no compute backend for it;
  // InvalidArgument once programs exist (set it before the first fit/evaluate/predict).
  void set_device(Device device);
  Device device() const { return device_; }
  // Keras' dtype policy (trainkit/nn/mixed_precision.h): "float32", "mixed_float16" or "mixed_bfloat16". A model
  // takes the global policy when made; setting it here gives every layer without a policy of its own this one.
  // InvalidArgument for an unknown name, and once programs exist (set it before the first fit/evaluate/predict,
  // or compile() again).
  void set_dtype_policy(const std::string& policy);
  const std::string& dtype_policy() const { return dtype_policy_; }
  // The policy `layer` runs under in this model, and the dtype it computes in. A layer that produces a model
  // output and has no policy of its own computes in float32 under a mixed policy (`why`, when non-null, says
  // so); BatchNormalization's math is float32 whatever its policy.
  std::string layer_dtype_policy(const Layer& layer) const;
  DType layer_compute_dtype(const Layer& layer, std::string* why = nullptr) const;
  // Keras' compile(auto_scale_loss=True): under mixed_float16 the optimizer gets dynamic loss scaling
  // (LossScaleOptimizer's defaults) unless it has its own. Set before the first fit.
  bool auto_scale_loss = true;
  // The loss scale the next training step uses (0 without loss scaling), and the steps skipped so far because
  // a gradient was not finite.
  float loss_scale() const;
  int64_t skipped_steps() const;
  // The finite steps since the scale last changed (Keras' LossScaleOptimizer step_counter; 0 before training).
  int64_t loss_scale_step_counter() const;
  // Restores loss scaling's state, as a Keras file holds it (dynamic_scale, step_counter). InvalidArgument when the
  // model trains without loss scaling, or for a scale that is not positive and finite or a negative counter.
  void set_loss_scale_state(float scale, int64_t step_counter);
  // The dtype of a program's input i: its Input's (float32 features, int32 / int64 token ids).
  DType input_dtype(size_t i) const;
  // The data-parallel strategy the model was compiled under (trainkit/nn/distribute.h): its description
  // ("MirroredStrategy over cpu:0, cpu:1 (2 replicas in sync)"), empty when none.
  std::string distribute_strategy() const;
  // False on every rank but 0 of a MultiWorkerMirroredStrategy (they train, but do not show progress).
  bool is_chief() const;

  // Builds the model from the first data when it has no graph yet (a Sequential without an Input layer learns its
  // input shape from x, as Keras builds on the first call); a no-op once built.
  virtual void ensure_built(const std::vector<Tensor>& x);
  // The runtime's training state of this model (its programs, optimizer state, device copies of the weights,
  // replicas; src/nn/training/trainer.h): internal, for trainkit's own readers and writers (io/). The API above is
  // the way to train.
  nn::Trainer& trainer() const { return *trainer_; }

 protected:
  Model(std::string name_prefix, std::string name);  // Sequential: graph set later
  void init_graph(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs);

 private:
  std::string name_;
  std::vector<KerasTensor> inputs_, outputs_;
  std::vector<LayerPtr> layers_;  // distinct layers in call order (inputs first)
  std::vector<std::shared_ptr<const Model>> nested_models_;
  std::map<const Layer*, const Model*> nested_member_;  // the layers of nested_models_, each to its model
  OptimizerPtr optimizer_;
  std::vector<Loss> losses_;
  std::vector<Metric> metrics_;
  std::shared_ptr<distribute::StrategyState> strategy_;  // compile() under a strategy's scope
  Device device_ = Device::cpu();
  std::string dtype_policy_;              // the global policy when the model was made, or set_dtype_policy's
  bool own_dtype_policy_ = false;         // set_dtype_policy was called: it overrides layers without their own
  std::string plan_policy_override_;      // memory_plan's "what would the other policy take" trace
  std::unique_ptr<nn::Trainer> trainer_;  // made with the model, after the fields above (it reads the device)

 protected:
  bool has_graph_ = false;
};

// Calls `model` like a layer on symbolic tensors, as Keras' `base_model(x, training=False)` (fine-tuning a frozen
// base inside a new model):
//   auto base = std::shared_ptr<tk::Model>(tk::models::load_model("base.keras"));
//   for (const tk::LayerPtr& l : base->layers()) l->trainable = false;
//   tk::KerasTensor in = tk::Input({32, 32, 3});
//   tk::KerasTensor h = tk::call_model(base, in, /*training=*/false);
//   tk::Model model(in, tk::layers::Dense(10)(tk::layers::GlobalAveragePooling2D()(h)));
// The model's layers are called on `inputs` (they are shared: training the new model trains them), and their nodes
// record the call (NestedCall), so model.save() writes `base` nested, as Keras does. `training` is recorded (Keras 3
// runs the layers in the calling model's mode whatever it says; a frozen BatchNormalization stays in inference mode).
// InvalidArgument when the inputs do not match the model's in count or shape; Unsupported for a model that itself
// calls a model (one level of nesting).
std::vector<KerasTensor> call_model(const std::shared_ptr<const Model>& model, const std::vector<KerasTensor>& inputs,
                                    std::optional<bool> training = std::nullopt);
KerasTensor call_model(const std::shared_ptr<const Model>& model, const KerasTensor& input,
                       std::optional<bool> training = std::nullopt);

// Unsupported, naming the device, when this build cannot run programs there (no compute backend for it).
void require_compute_device(Device device);
// InvalidArgument for a name Keras does not know; Unsupported for a Keras policy trainkit does not run.
void require_dtype_policy(const std::string& policy);

class Sequential : public Model {
 public:
  explicit Sequential(std::vector<LayerPtr> layers = {}, std::string name = {});
  // Appends a layer (before the first fit/compile build).
  void add(LayerPtr layer);

 protected:
  void ensure_built(const std::vector<Tensor>& x) override;

 private:
  std::vector<LayerPtr> pending_;
};

}  // namespace tk
