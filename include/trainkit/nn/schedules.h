// Keras' learning-rate schedules (keras.optimizers.schedules): the learning rate as a function of the
// optimizer's step, evaluated before every step in float32 as Keras evaluates them.
//
//   namespace s = tk::optimizers::schedules;
//   auto opt = tk::optimizers::Adam();
//   opt->set_learning_rate_schedule(s::ExponentialDecay({.initial_learning_rate = 1e-3f, .decay_steps = 1000,
//                                                        .decay_rate = 0.9f}));
//   opt->set_learning_rate_schedule(s::CosineDecay({.initial_learning_rate = 0.0f, .decay_steps = 9000,
//                                                   .warmup_target = 1e-3f, .warmup_steps = 1000}));
// While a schedule is set, set_learning_rate() (and callbacks that use it, like ReduceLROnPlateau) is refused,
// as in Keras.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tk::optimizers::schedules {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual float operator()(int64_t step) const = 0;
  virtual std::string name() const = 0;  // Keras' class name
};
using LearningRateSchedulePtr = std::shared_ptr<const LearningRateSchedule>;

// initial * decay_rate ^ (step / decay_steps); the exponent floored when staircase.
struct ExponentialDecayOptions {
  float initial_learning_rate = 0.0f;
  int64_t decay_steps = 0;
  float decay_rate = 0.0f;
  bool staircase = false;
};
LearningRateSchedulePtr ExponentialDecay(ExponentialDecayOptions o);

// values[i] while step <= boundaries[i] (values has one more entry than boundaries).
LearningRateSchedulePtr PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<float> values);

// (initial - end) * (1 - step / decay_steps) ^ power + end; with cycle, decay_steps grows to the next multiple.
struct PolynomialDecayOptions {
  float initial_learning_rate = 0.0f;
  int64_t decay_steps = 0;
  float end_learning_rate = 0.0001f;
  float power = 1.0f;
  bool cycle = false;
};
LearningRateSchedulePtr PolynomialDecay(PolynomialDecayOptions o);

// initial / (1 + decay_rate * step / decay_steps); the ratio floored when staircase (ExponentialDecay's arguments).
using InverseTimeDecayOptions = ExponentialDecayOptions;
LearningRateSchedulePtr InverseTimeDecay(InverseTimeDecayOptions o);

// Optional linear warmup from initial to warmup_target over warmup_steps, then cosine decay over decay_steps
// down to alpha * (warmup_target or initial).
struct CosineDecayOptions {
  float initial_learning_rate = 0.0f;
  int64_t decay_steps = 0;
  float alpha = 0.0f;
  std::optional<float> warmup_target = std::nullopt;
  int64_t warmup_steps = 0;
};
LearningRateSchedulePtr CosineDecay(CosineDecayOptions o);

}  // namespace tk::optimizers::schedules
