// The options a learning-rate schedule of nn/schedules.h was made with, so that a save can write it as Keras'
// config (io/keras_schedules.cpp) and a load rebuild it.
//
//   if (auto o = tk::optimizers::schedules::schedule_options(*opt->learning_rate_schedule()))
//     if (auto* cosine = std::get_if<CosineDecayOptions>(&*o)) ...;   // name() tells ExponentialDecay's options
//                                                                      // from InverseTimeDecay's (the same struct)
#pragma once
#include <optional>
#include <variant>
#include <vector>

#include "trainkit/nn/schedules.h"

namespace tk::optimizers::schedules {

struct PiecewiseConstantOptions {
  std::vector<int64_t> boundaries;
  std::vector<float> values;  // one more than boundaries
};

using ScheduleOptions =
    std::variant<ExponentialDecayOptions, PiecewiseConstantOptions, PolynomialDecayOptions, CosineDecayOptions>;

// nullopt: a schedule not made by nn/schedules.h's functions (a LearningRateSchedule subclass of the caller's own).
std::optional<ScheduleOptions> schedule_options(const LearningRateSchedule& schedule);

}  // namespace tk::optimizers::schedules
