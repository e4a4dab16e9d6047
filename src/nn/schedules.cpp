// Keras 3's learning-rate schedules (keras/src/optimizers/schedules/learning_rate_schedule.py), in float32.
#include "trainkit/nn/schedules.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>

#include "nn/schedule_options.h"
#include "trainkit/core/error.h"

namespace tk::optimizers::schedules {
namespace {

void require(bool ok, const std::string& schedule, const std::string& what) {
  if (!ok) throw InvalidArgument(schedule + ": " + what);
}

class Fn final : public LearningRateSchedule {
 public:
  template <typename F>
  Fn(std::string name, ScheduleOptions options, F f)
      : name_(std::move(name)), options_(std::move(options)), f_(std::move(f)) {}
  float operator()(int64_t step) const override { return f_(static_cast<float>(step)); }
  std::string name() const override { return name_; }
  const ScheduleOptions& options() const { return options_; }

 private:
  std::string name_;
  ScheduleOptions options_;
  std::function<float(float)> f_;
};

}  // namespace

LearningRateSchedulePtr ExponentialDecay(ExponentialDecayOptions o) {
  require(o.decay_steps > 0, "ExponentialDecay", "decay_steps must be > 0, got " + std::to_string(o.decay_steps));
  return std::make_shared<Fn>("ExponentialDecay", o, [o](float step) {
    float p = step / static_cast<float>(o.decay_steps);
    if (o.staircase) p = std::floor(p);
    return o.initial_learning_rate * std::pow(o.decay_rate, p);
  });
}

LearningRateSchedulePtr PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<float> values) {
  require(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay",
          "values must have one more entry than boundaries, got " + std::to_string(values.size()) + " and " +
              std::to_string(boundaries.size()));
  for (size_t i = 1; i < boundaries.size(); ++i)
    require(boundaries[i - 1] < boundaries[i], "PiecewiseConstantDecay", "boundaries must increase");
  return std::make_shared<Fn>("PiecewiseConstantDecay", PiecewiseConstantOptions{boundaries, values},
                              [boundaries, values](float step) {
                                for (size_t i = 0; i < boundaries.size(); ++i)
                                  if (step <= static_cast<float>(boundaries[i])) return values[i];
                                return values.back();
                              });
}

LearningRateSchedulePtr PolynomialDecay(PolynomialDecayOptions o) {
  require(o.decay_steps > 0, "PolynomialDecay", "decay_steps must be > 0, got " + std::to_string(o.decay_steps));
  return std::make_shared<Fn>("PolynomialDecay", o, [o](float step) {
    float decay_steps = static_cast<float>(o.decay_steps);
    if (o.cycle) {  // the next multiple of decay_steps at or after step (at least one)
      const float multiplier = step == 0.0f ? 1.0f : std::ceil(step / decay_steps);
      decay_steps *= multiplier;
    } else {
      step = std::min(step, decay_steps);
    }
    const float p = step / decay_steps;
    return (o.initial_learning_rate - o.end_learning_rate) * std::pow(1.0f - p, o.power) + o.end_learning_rate;
  });
}

LearningRateSchedulePtr InverseTimeDecay(InverseTimeDecayOptions o) {
  require(o.decay_steps > 0, "InverseTimeDecay", "decay_steps must be > 0, got " + std::to_string(o.decay_steps));
  return std::make_shared<Fn>("InverseTimeDecay", o, [o](float step) {
    float p = step / static_cast<float>(o.decay_steps);
    if (o.staircase) p = std::floor(p);
    return o.initial_learning_rate / (1.0f + o.decay_rate * p);
  });
}

LearningRateSchedulePtr CosineDecay(CosineDecayOptions o) {
  require(o.decay_steps > 0, "CosineDecay", "decay_steps must be > 0, got " + std::to_string(o.decay_steps));
  require(o.warmup_steps >= 0, "CosineDecay", "warmup_steps must be >= 0");
  return std::make_shared<Fn>("CosineDecay", o, [o](float step) {
    const float decay_steps = static_cast<float>(o.decay_steps);
    const float warmup_steps = static_cast<float>(o.warmup_steps);
    auto decay = [&](float s, float from) {
      s = std::min(s, decay_steps);
      const float cosine = 0.5f * (1.0f + std::cos(std::numbers::pi_v<float> * (s / decay_steps)));
      return ((1.0f - o.alpha) * cosine + o.alpha) * from;
    };
    if (!o.warmup_target) return decay(step, o.initial_learning_rate);
    if (step < warmup_steps) {  // linear warmup
      const float done = step / warmup_steps;
      return done * (*o.warmup_target - o.initial_learning_rate) + o.initial_learning_rate;
    }
    return decay(step - warmup_steps, *o.warmup_target);
  });
}

std::optional<ScheduleOptions> schedule_options(const LearningRateSchedule& schedule) {
  const auto* fn = dynamic_cast<const Fn*>(&schedule);
  if (!fn) return std::nullopt;
  return fn->options();
}

}  // namespace tk::optimizers::schedules
