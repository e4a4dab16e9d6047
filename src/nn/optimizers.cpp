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

namespace {

class Impl final : public Optimizer {
 public:
  Impl(std::string name, int slots) : name_(std::move(name)), slots_(slots) {}
  std::string name() const override { return name_; }
  int slots_per_variable() const override { return slots_; }

 private:
  std::string name_;
  int slots_;
};

void check(bool ok, const std::string& opt, const std::string& what, float v, const std::string& range) {
  if (!ok) throw InvalidArgument(opt + ": " + what + " must be " + range + ", got " + std::to_string(v));
}

}  // namespace

void nn::apply_common(Optimizer& opt, const std::string& name, float lr, const optimizers::Common& c) {
  Optimizer* o = &opt;
  o->set_learning_rate(lr);
  check(c.weight_decay >= 0.0f && std::isfinite(c.weight_decay), name, "weight_decay", c.weight_decay, ">= 0");
  check(c.clipnorm >= 0.0f && std::isfinite(c.clipnorm), name, "clipnorm", c.clipnorm, ">= 0 (0 disables it)");
  check(c.clipvalue >= 0.0f && std::isfinite(c.clipvalue), name, "clipvalue", c.clipvalue, ">= 0 (0 disables it)");
  o->config().weight_decay = c.weight_decay;
  o->config().clipnorm = c.clipnorm;
  o->config().clipvalue = c.clipvalue;
  check(c.global_clipnorm >= 0.0f && std::isfinite(c.global_clipnorm), name, "global_clipnorm", c.global_clipnorm,
        ">= 0 (0 disables it)");
  if (c.clipnorm > 0.0f && c.global_clipnorm > 0.0f)
    throw InvalidArgument(name + ": only one of clipnorm and global_clipnorm can be set (as Keras)");
  o->config().global_clipnorm = c.global_clipnorm;
}

namespace {

std::shared_ptr<Impl> make(const std::string& name, graph::Op rule, int slots, float lr, const optimizers::Common& c) {
  auto o = std::make_shared<Impl>(name, slots);
  o->config().update_op = rule;  // the program builder emits this op: no dispatch on names
  nn::apply_common(*o, name, lr, c);
  return o;
}

}  // namespace

namespace optimizers {

OptimizerPtr SGD(SGDOptions o) {
  auto opt = make("SGD", graph::Op::SgdUpdate, 1, o.learning_rate, o);
  check(o.momentum >= 0.0f && o.momentum <= 1.0f, "SGD", "momentum", o.momentum, "in [0, 1]");
  opt->config().momentum = o.momentum;
  opt->config().nesterov = o.nesterov;
  return opt;
}

OptimizerPtr Adam(AdamOptions o) {
  auto opt = make("Adam", graph::Op::AdamUpdate, 2, o.learning_rate, o);
  check(o.beta_1 >= 0.0f && o.beta_1 < 1.0f, "Adam", "beta_1", o.beta_1, "in [0, 1)");
  check(o.beta_2 >= 0.0f && o.beta_2 < 1.0f, "Adam", "beta_2", o.beta_2, "in [0, 1)");
  check(o.epsilon > 0.0f, "Adam", "epsilon", o.epsilon, "> 0");
  opt->config().beta_1 = o.beta_1;
  opt->config().beta_2 = o.beta_2;
  opt->config().epsilon = o.epsilon;
  return opt;
}

OptimizerPtr AdamW(AdamWOptions o) {
  auto opt = std::static_pointer_cast<Impl>(Adam(o));
  auto w = std::make_shared<Impl>("AdamW", 2);
  w->config() = opt->config();
  return w;
}

OptimizerPtr RMSprop(RMSpropOptions o) {
  auto opt = make("RMSprop", graph::Op::RmspropUpdate, 3, o.learning_rate, o);
  check(o.rho >= 0.0f && o.rho < 1.0f, "RMSprop", "rho", o.rho, "in [0, 1)");
  check(o.momentum >= 0.0f && o.momentum <= 1.0f, "RMSprop", "momentum", o.momentum, "in [0, 1]");
  check(o.epsilon > 0.0f, "RMSprop", "epsilon", o.epsilon, "> 0");
  opt->config().rho = o.rho;
  opt->config().momentum = o.momentum;
  opt->config().epsilon = o.epsilon;
  opt->config().centered = o.centered;
  return opt;
}

OptimizerPtr get(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "sgd") return SGD();
  if (n == "adam") return Adam();
  if (n == "adamw") return AdamW();
  if (n == "rmsprop") return RMSprop();
  if (const nn::OptimizerRule* rule = nn::find_rule(n))
    return nn::make_rule_optimizer(*rule, {}, rule->learning_rate, {});
  std::string names = "sgd, adam, adamw, rmsprop";
  for (const std::string& r : nn::rule_names()) {
    std::string l = r;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    names += ", " + l;
  }
  throw InvalidArgument("unknown optimizer '" + name + "' (expected one of " + names + ")");
}

OptimizerPtr get(const std::string& name, float learning_rate) {
  OptimizerPtr o = get(name);
  o->set_learning_rate(learning_rate);
  return o;
}

}  // namespace optimizers
}  // namespace tk
