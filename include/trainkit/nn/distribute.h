// Data parallel training over devices in one process, with Keras' shape (tf.distribute.MirroredStrategy).
//
//   const size_t GiB = size_t{1} << 30;
//   tk::config::set_logical_device_configuration(tk::Device::cpu(), {GiB, GiB});  // cpu:0 and cpu:1
//   tk::distribute::MirroredStrategy strategy({tk::Device::cpu(0), tk::Device::cpu(1)});
//   auto model = tk::models::tutorial_cnn();
//   {
//     auto scope = strategy.scope();          // models compiled inside the scope are replicated
//     model->compile(tk::optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
//   }
//   model->fit(x, y, {.batch_size = 128});   // each step: 64 rows per replica, one update all replicas see
//
// What a step does: the global batch is split across the replicas in order (the first batch % replicas get one
// row more; no row is dropped or repeated, and a batch with fewer rows than replicas runs on fewer replicas).
// Each replica runs its own program on its own device, under that device's budget, on its own thread with
// cores / replicas kernel threads. Its gradients are summed across replicas by AllReduce ops in the program
// (each weighted by the replica's share of the global batch, so the step equals one device on the whole batch
// up to float rounding, Keras' averaging) and every replica applies the same update to its copy of the weights.
// The model's own weights are replica 0's; the other copies are refreshed from them when fit or train_on_batch
// starts. evaluate and predict run on replica 0. Randomness (dropout) is keyed by the sample's index in the
// global batch, so N replicas draw what one device would. BatchNormalization computes its statistics per
// replica (as Keras does) and keeps replica 0's moving statistics.
//
// A collective that makes no progress within the timeout (Options::collective_timeout, or TK_COLLECTIVE_TIMEOUT
// in seconds; default 300 s) ends the step on every replica with a CollectiveError naming the collective and the
// replicas that never arrived; a replica that throws ends the others' waits at once.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainkit/core/device.h"

namespace tk::distribute {

struct StrategyState;  // nn/distribute/strategy_state.h

class MirroredStrategy {
 public:
  struct Options {
    std::chrono::milliseconds collective_timeout{0};  // 0: TK_COLLECTIVE_TIMEOUT seconds, else 300 s
  };
  // Distinct devices of one kind. Empty: every cpu device (the logical devices when the cpu is split).
  explicit MirroredStrategy(std::vector<Device> devices = {});
  MirroredStrategy(std::vector<Device> devices, Options options);

  int num_replicas_in_sync() const;
  const std::vector<Device>& devices() const;
  // "MirroredStrategy over cpu:0, cpu:1 (2 replicas in sync)"
  std::string describe() const;

  // While a Scope lives, models compiled on this thread are replicated over the strategy's devices.
  class Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class MirroredStrategy;
    explicit Scope(std::shared_ptr<StrategyState> s);
    std::shared_ptr<StrategyState> previous_;
  };
  [[nodiscard]] Scope scope() const;

  const std::shared_ptr<StrategyState>& state() const { return state_; }

 private:
  std::shared_ptr<StrategyState> state_;
};

// The strategy whose scope is open on this thread, or null (Keras' tf.distribute.get_strategy, without the
// default strategy object).
std::shared_ptr<StrategyState> current_strategy();

}  // namespace tk::distribute
