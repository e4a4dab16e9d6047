// Optimizers with Keras 3 defaults and update rules.
//
//   model.compile(tk::optimizers::Adam({.learning_rate = 1e-3f}), "mse");
//   model.compile(tk::optimizers::SGD({.learning_rate = 0.01f, .momentum = 0.9f, .nesterov = true}), ...);
//   model.compile(tk::optimizers::get("rmsprop"), ...);     // by name, with defaults
//   tk::optimizers::Adam({{.clipnorm = 1.0f}});             // the common options (Common) come first, in braces
//   tk::optimizers::Adam({{.global_clipnorm = 1.0f}, 1e-3f}); // one norm over all gradients, learning rate 1e-3
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trainkit/nn/schedules.h"

namespace tk {

namespace graph {
struct UpdateConfig;
}

class Optimizer {
 public:
  virtual ~Optimizer();
  virtual std::string name() const = 0;  // Keras' class name: "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", ...
  virtual int slots_per_variable() const = 0;
  // The update's settings; a change takes effect at the next step (turning global_clipnorm or skip_nonfinite on or
  // off rebuilds the training program once).
  graph::UpdateConfig& config() { return *config_; }
  const graph::UpdateConfig& config() const { return *config_; }
  // The rate the next step uses: the schedule's value at iterations() when one is set.
  float learning_rate() const;
  void set_learning_rate(float lr);  // takes effect at the next step; InvalidArgument while a schedule is set
  // Keras' `learning_rate=schedule` (nn/schedules.h); nullptr goes back to the fixed rate.
  void set_learning_rate_schedule(optimizers::schedules::LearningRateSchedulePtr schedule);
  const optimizers::schedules::LearningRateSchedulePtr& learning_rate_schedule() const { return schedule_; }
  int64_t iterations() const;
  // Dynamic loss scaling (LossScaleOptimizer): the initial scale, 0 when off.
  float initial_loss_scale() const;

 protected:
  Optimizer();
  std::unique_ptr<graph::UpdateConfig> config_;
  optimizers::schedules::LearningRateSchedulePtr schedule_;
};
using OptimizerPtr = std::shared_ptr<Optimizer>;

namespace optimizers {

// Options every optimizer accepts (Keras' base optimizer arguments).
struct Common {
  float weight_decay = 0.0f;     // decoupled: w -= lr * weight_decay * w before the update
  float clipnorm = 0.0f;         // clip each gradient to this L2 norm (0 = off)
  float global_clipnorm = 0.0f;  // clip all gradients together to this L2 norm (0 = off; not with clipnorm)
  float clipvalue = 0.0f;        // clip each gradient element to [-v, v] (0 = off)
};

struct SGDOptions : Common {
  float learning_rate = 0.01f;
  float momentum = 0.0f;
  bool nesterov = false;
};
struct AdamOptions : Common {
  float learning_rate = 0.001f;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;
};
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 0.004f; }
};
struct RMSpropOptions : Common {
  float learning_rate = 0.001f;
  float rho = 0.9f, momentum = 0.0f, epsilon = 1e-7f;
  bool centered = false;
};

// Written in the general tensor ops (src/nn/optimizers/: one file each, src/nn/optimizer_rule.h), Keras 3's math.
// (SGD, Adam, AdamW and RMSprop are described the same way and run fused update ops.)
struct AdagradOptions : Common {
  float learning_rate = 0.001f;
  float initial_accumulator_value = 0.1f, epsilon = 1e-7f;
};
struct AdadeltaOptions : Common {
  float learning_rate = 0.001f;
  float rho = 0.95f, epsilon = 1e-7f;
};
struct LionOptions : Common {
  float learning_rate = 1e-4f;
  float beta_1 = 0.9f, beta_2 = 0.99f;
};
struct NadamOptions : Common {
  float learning_rate = 0.001f;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;
};
struct AdafactorOptions : Common {
  float learning_rate = 0.001f;
  float beta_2_decay = -0.8f, epsilon_1 = 1e-30f, epsilon_2 = 1e-3f, clip_threshold = 1.0f;
  bool relative_step = true;
};
OptimizerPtr Adagrad(AdagradOptions options = {});
OptimizerPtr Adadelta(AdadeltaOptions options = {});
OptimizerPtr Lion(LionOptions options = {});
OptimizerPtr Nadam(NadamOptions options = {});
OptimizerPtr Adafactor(AdafactorOptions options = {});

OptimizerPtr SGD(SGDOptions options = {});
OptimizerPtr Adam(AdamOptions options = {});
OptimizerPtr AdamW(AdamWOptions options = {});
OptimizerPtr RMSprop(RMSpropOptions options = {});
// Keras' LossScaleOptimizer: dynamic loss scaling for float16 compute. The loss is multiplied by the scale before
// differentiating and the gradients divided by it before the update (and before clipnorm/global_clipnorm); a
// step with a non-finite gradient is skipped (weights, slots and iterations untouched) and halves the scale;
// dynamic_growth_steps finite steps in a row double it. compile() switches it on by itself under
// mixed_float16 (Model::auto_scale_loss). trainkit returns `inner` itself with loss scaling on (one object: its
// learning rate, schedule and slots stay the inner optimizer's); Model::loss_scale() reads the current scale.
struct LossScaleOptions {
  float initial_scale = 32768.0f;  // 2^15
  int64_t dynamic_growth_steps = 2000;
};
OptimizerPtr LossScaleOptimizer(OptimizerPtr inner, LossScaleOptions options = {});

// By Keras class name with Keras defaults (case-insensitive): "sgd", "adam", "adamw", "rmsprop", "adagrad",
// "adadelta", "lion", "nadam", "adafactor" (every rule in src/nn/optimizer_rule.cpp's kRules).
OptimizerPtr get(const std::string& name);
// get()'s names, lower case, in the rules' order (what --optimizer takes and --help lists).
std::vector<std::string> names();
// By name with a learning rate (the CLI's --optimizer/--learning-rate).
OptimizerPtr get(const std::string& name, float learning_rate);

}  // namespace optimizers
}  // namespace tk
