#include "trainkit/nn/optimizers.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "graph/op.h"
#include "nn/optimizer_rule.h"
#include "trainkit/core/error.h"

namespace tk {

Optimizer::Optimizer() : config_(std::make_unique<graph::UpdateConfig>()) {}
Optimizer::~Optimizer() = default;
float Optimizer::learning_rate() const {
  return schedule_ ? (*schedule_)(config_->iterations) : config_->learning_rate;
}
int64_t Optimizer::iterations() const { return config_->iterations; }
float Optimizer::initial_loss_scale() const { return config_->loss_scale_initial; }

OptimizerPtr optimizers::LossScaleOptimizer(OptimizerPtr inner, LossScaleOptions o) {
  if (!inner) throw InvalidArgument("LossScaleOptimizer: the inner optimizer is null");
  if (!(o.initial_scale > 0.0f) || !std::isfinite(o.initial_scale))
    throw InvalidArgument("LossScaleOptimizer: initial_scale must be a finite number > 0, got " +
                          std::to_string(o.initial_scale));
  if (o.dynamic_growth_steps < 1)
    throw InvalidArgument("LossScaleOptimizer: dynamic_growth_steps must be >= 1, got " +
                          std::to_string(o.dynamic_growth_steps));
  inner->config().loss_scale_initial = o.initial_scale;
  inner->config().loss_scale_growth_steps = o.dynamic_growth_steps;
  return inner;
}
void Optimizer::set_learning_rate_schedule(optimizers::schedules::LearningRateSchedulePtr schedule) {
  schedule_ = std::move(schedule);
}
void Optimizer::set_learning_rate(float lr) {
  if (schedule_)
    throw InvalidArgument(name() + ": the learning rate follows a " + schedule_->name() +
                          " schedule, so it cannot be set (as in Keras); remove the schedule first "
                          "(set_learning_rate_schedule(nullptr))");
  if (!(lr >= 0.0f) || !std::isfinite(lr))
    throw InvalidArgument(name() + ": learning_rate must be a finite number >= 0, got " + std::to_string(lr));
  config_->learning_rate = lr;
}

void nn::require(bool ok, const std::string& opt, const std::string& what, float v, const std::string& range) {
  if (!ok) throw InvalidArgument(opt + ": " + what + " must be " + range + ", got " + std::to_string(v));
}

void nn::apply_common(Optimizer& opt, const std::string& name, float lr, const optimizers::Common& c) {
  opt.set_learning_rate(lr);
  nn::require(c.weight_decay >= 0.0f && std::isfinite(c.weight_decay), name, "weight_decay", c.weight_decay, ">= 0");
  nn::require(c.clipnorm >= 0.0f && std::isfinite(c.clipnorm), name, "clipnorm", c.clipnorm, ">= 0 (0 disables it)");
  nn::require(c.clipvalue >= 0.0f && std::isfinite(c.clipvalue), name, "clipvalue", c.clipvalue,
              ">= 0 (0 disables it)");
  opt.config().weight_decay = c.weight_decay;
  opt.config().clipnorm = c.clipnorm;
  opt.config().clipvalue = c.clipvalue;
  nn::require(c.global_clipnorm >= 0.0f && std::isfinite(c.global_clipnorm), name, "global_clipnorm", c.global_clipnorm,
              ">= 0 (0 disables it)");
  if (c.clipnorm > 0.0f && c.global_clipnorm > 0.0f)
    throw InvalidArgument(name + ": only one of clipnorm and global_clipnorm can be set (as Keras)");
  opt.config().global_clipnorm = c.global_clipnorm;
}

namespace optimizers {

OptimizerPtr get(const std::string& name) {
  if (const nn::OptimizerRule* rule = nn::find_rule(name)) return nn::make_rule_optimizer(*rule);
  throw InvalidArgument("unknown optimizer '" + name + "' (expected one of " + nn::rule_list() + ")");
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (std::string n : nn::rule_names()) {
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.push_back(n);
  }
  return out;
}

OptimizerPtr get(const std::string& name, float learning_rate) {
  OptimizerPtr o = get(name);
  o->set_learning_rate(learning_rate);
  return o;
}

}  // namespace optimizers
}  // namespace tk
