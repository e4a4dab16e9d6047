// The training state of one model, beside it: what a Model's fit / evaluate / predict / train_on_batch run with, and
// the passes themselves. The Model holds layers, weights and the compile configuration; its Keras API forwards here.
//
//   tk::Model model(in, out);                  // makes its Trainer (one, for the model's life)
//   model.compile(opt, loss);                  // Trainer::reset: programs and optimizer state start over
//   model.fit(x, y, {.batch_size = 128});      // Trainer::fit -> fit_loop -> train_step, programs from programs()
//   model.trainer().programs().optimizer_state();  // internal readers (io/slot_views.cpp): the slots as they are
//
// Responsibilities, each in its own class: nn::ProgramCache (per replica: compiled programs, their arena and stream;
// with it nn::OptimizerState, the slots / loss scale / accumulators, and nn::DeviceMirrors, the weights' device
// copies), the batch sources and the one batch loop, nn::for_each_batch (nn/training/batch_source.h),
// driven by fit_loop (fit_loop.cpp) and inference_loop (inference_loop.cpp). The Trainer owns the caches and the
// counters the passes share (step, resume position).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/nn/model.h"

namespace tk::nn {

class ProgramCache;
struct Accumulator;
class BatchSource;
struct InferenceHooks;
namespace distribute {
class MpiCollective;
}  // namespace distribute

class Trainer {
 public:
  // Made once, with the model (Model's constructors); reset() starts it over.
  explicit Trainer(Model& model);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // compile(), set_device, plan_for_absent_device: every program, optimizer slot, device copy and replica goes (the
  // model's weights are brought up to date first). `strategy`: the one compile() ran under (null: none);
  // `absent_device_budget` > 0: the model's device is planned for but not here (Model::plan_for_absent_device; compile
  // passes the current one on).
  void reset(std::shared_ptr<::tk::distribute::StrategyState> strategy, size_t absent_device_budget);

  // ---- the passes (Model's public API forwards here)
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y, FitOptions options);
  History fit(const data::Dataset& dataset, FitOptions options);
  Logs evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y, EvaluateOptions options);
  Logs evaluate(const data::Dataset& dataset, EvaluateOptions options);
  std::vector<Tensor> predict(const std::vector<Tensor>& x, int64_t batch_size);
  std::vector<Tensor> predict(const data::Dataset& dataset);
  // sample_weight (or null): Keras' per-row weights of the batch.
  const Logs& train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                             const Tensor* sample_weight = nullptr);

  // ---- memory (nn/training/trainer_memory.cpp, nn/distribute/auto_batch.cpp)
  // The plan of replica `replica`'s training program on its device (0: the model's own programs and device).
  MemoryPlan memory_plan_with(int64_t batch_size, bool remat, int replica = 0);
  int64_t largest_batch_that_fits_on(int replica, size_t available, int64_t cap);
  size_t memory_available_for_training() const;
  // memory_available_for_training() for replica r of a strategy: what its device's budget leaves beside what others
  // hold there (its own weight copies, optimizer state and arena count as available).
  size_t replica_memory_available(int r);
  int64_t auto_batch_size(int64_t cap, bool report, const std::string& what = "fit: batch_size auto");
  int64_t auto_micro_batch_size(int64_t batch, bool report, const std::string& what = "fit: micro_batch_size auto");
  size_t absent_device_budget() const { return absent_device_budget_; }

  // ---- state
  // Replica r's programs (0: the model's own, on its device); a replica > 0 is made when first asked for.
  ProgramCache& programs(int replica = 0);
  const ProgramCache& programs() const { return *caches_[0]; }
  // A model on a GPU trains device copies of its weights: bring the model's weights up to date before the host reads
  // them (get_weights, save, a training state), and send them to the device after the host wrote them (set_weights,
  // load_weights), even in the middle of a fit (a callback). No-ops on the cpu.
  void sync_host_weights();
  void weights_changed_on_host();
  // The dtype policy each layer's programs were built under (empty before the first build): set by ProgramCache.
  std::vector<std::string>& run_policies() { return run_policies_; }
  const std::shared_ptr<::tk::distribute::StrategyState>& strategy() const { return strategy_; }
  // Under loss scaling: "loss_scale" and "skipped_steps" in the logs callbacks receive.
  void add_loss_scale_logs(Logs& logs) const;

  // ---- checks the passes share (nn/training/trainer_checks.cpp)
  void check_compiled(const char* what) const;
  // InvalidArgument naming the layer when a dtype policy changed after the programs were built.
  void check_policies(const char* what) const;
  // weighted: y ends with the rows' sample weights (checked by check_sample_weight).
  void check_data(const std::vector<Tensor>& x, const std::vector<Tensor>* y, const char* what,
                  bool weighted = false) const;
  // Splits a dataset element into x (the model's inputs) and y (the rest: the targets, and with need_y an optional
  // last component, the sample weights); InvalidArgument when it cannot.
  void split_element(data::Element& e, std::vector<Tensor>& x, std::vector<Tensor>& y, bool need_y,
                     const char* what) const;

  uint64_t step = 0;                  // training steps run (dropout randomness)
  FitPosition position;               // kept current by the fit loop (no allocation per step)
  std::optional<FitPosition> resume;  // set by restore_training_state, taken by the next fit
  bool replicas_synced = false;       // the replicas' weights equal the model's (fit/train_on_batch clear it)
  // The sample weights of the pass running now (nn/training/sample_weights.h, SampleWeightScope): 0 none, else the
  // key of their shape (sample_weight_key). Training and evaluation programs are built (and cached) with a weight
  // input when it is not 0, and the pass's y arrays then end with the weights.
  int64_t sample_weight_key = 0;

 private:
  // Every fit's driver of the batch loop (fit_loop.cpp): epochs of steps over `source`'s batches, resume, lagged logs,
  // callbacks; `validate` (may be empty) gives the epoch's validation logs.
  History fit_loop(BatchSource& source, const FitOptions& o, int64_t micro, const std::function<Logs()>& validate);
  // Every evaluate's and predict's driver of the batch loop (inference_loop.cpp): `source`'s batches in rounds, on this
  // thread, on the replicas (MirroredStrategy) or on this rank's share (MultiWorkerMirroredStrategy). Returns the
  // ranks' group when there is one (the caller sums the logs / gathers the outputs), else null.
  distribute::MpiCollective* inference_loop(BatchSource& source, const InferenceHooks& hooks);
  Logs run_evaluation(const std::vector<Tensor>& x, const std::vector<Tensor>& y, int64_t batch_size, int64_t steps);
  Logs run_evaluation(const data::Dataset& dataset, int64_t steps);
  // One optimizer step on rows idx[0..bs) (or [0, bs) when idx is null), in micro-batches when micro > 0.
  // own_rows (MultiWorkerMirroredStrategy over a sharded Dataset): x and y hold only this rank's rows of a global
  // batch of bs rows (nn/distribute/batch_split.h).
  void train_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx, int64_t bs,
                  int64_t micro, Accumulator& acc, bool own_rows = false);
  // train_step under a strategy with several replicas (nn/distribute/replicated_step.cpp): the batch split across
  // the replicas, run side by side, gradients all-reduced in their programs.
  void train_step_replicated(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx, int64_t bs,
                             int64_t micro, Accumulator& acc, bool own_rows = false);
  // Evaluation under MultiWorkerMirroredStrategy with more than one rank (replicated_step.cpp): batch k runs on rank
  // k % size, and evaluation_logs sums the ranks' logs. Checks that every rank evaluates the same model on the same
  // `data` (its description, and the CRC-32C of `arrays`' bytes when given) and gives every rank rank 0's weights
  // when they may differ (before the first fit); null without such a strategy (this process runs every batch).
  distribute::MpiCollective* evaluation_group(const std::string& data,
                                              const std::vector<const std::vector<Tensor>*>& arrays = {});
  // evaluate's logs: the replicas' row-weighted sums merged, then (world not null) summed over the ranks.
  Logs evaluation_logs(const std::vector<Accumulator>& sums, distribute::MpiCollective* world);
  // The replicas evaluate and predict run on in this process (MirroredStrategy), else 1.
  int inference_replicas() const;
  // auto_batch_size / auto_micro_batch_size under a strategy with several replicas in sync (auto_batch.cpp).
  int64_t replicated_auto_batch(int64_t cap, bool micro, int64_t batch, bool report, const std::string& what);
  bool replicated() const;  // a strategy with several replicas in sync

  Model& model_;
  std::shared_ptr<::tk::distribute::StrategyState> strategy_;  // compile() under a strategy's scope
  size_t absent_device_budget_ = 0;
  // One per replica: [0] the model's own (made with the Trainer and at each reset), [r] made when first asked for.
  std::vector<std::unique_ptr<ProgramCache>> caches_;
  std::vector<std::string> run_policies_;
  Logs batch_logs_;                 // train_on_batch results, updated in place
  std::vector<Tensor> weighted_y_;  // train_on_batch with sample weights: y, then the weights (capacity reused)
};

}  // namespace tk::nn
