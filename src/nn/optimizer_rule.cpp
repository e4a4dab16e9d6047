#include "nn/optimizer_rule.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "graph/op.h"
#include "graph/tensor_ops.h"
#include "trainkit/core/error.h"

namespace tk::nn {
namespace {
using graph::BinaryFn;
using graph::ReduceFn;
using graph::UnaryFn;
namespace ops = graph::ops;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Every optimizer written as a rule: one line each.
constexpr const OptimizerRule& (*kRules[])() = {adagrad_rule, adadelta_rule, lion_rule};

class RuleOptimizer final : public Optimizer {
 public:
  RuleOptimizer(const OptimizerRule& rule, std::map<std::string, float> hyper) : state_{&rule, std::move(hyper)} {
    config().update_op = graph::Op::Assign;  // not a fused update op: ProgramCache emits the rule's ops
  }
  std::string name() const override { return state_.rule->keras_class; }
  int slots_per_variable() const override { return static_cast<int>(state_.rule->slots.size()); }
  const RuleState& state() const { return state_; }

 private:
  RuleState state_;
};

}  // namespace

const OptimizerRule* find_rule(const std::string& name) {
  for (auto rule : kRules)
    if (lower(rule().keras_class) == lower(name)) return &rule();
  return nullptr;
}

std::vector<std::string> rule_names() {
  std::vector<std::string> out;
  for (auto rule : kRules) out.push_back(rule().keras_class);
  return out;
}

OptimizerPtr make_rule_optimizer(const OptimizerRule& rule, std::map<std::string, float> hyper, float learning_rate,
                                 const optimizers::Common& common) {
  for (const auto& [k, v] : hyper)
    if (std::none_of(rule.hyper.begin(), rule.hyper.end(), [&](const auto& h) { return h.first == k; }))
      throw InvalidArgument(rule.keras_class + ": unknown option '" + k + "'");
  for (const auto& [k, def] : rule.hyper) {
    hyper.emplace(k, def);
    if (!std::isfinite(hyper.at(k)))
      throw InvalidArgument(rule.keras_class + ": " + k + " must be finite, got " + std::to_string(hyper.at(k)));
  }
  if (rule.check) rule.check(hyper);
  auto o = std::make_shared<RuleOptimizer>(rule, std::move(hyper));
  apply_common(*o, rule.keras_class, learning_rate, common);
  return o;
}

const RuleState* rule_state(const Optimizer& opt) {
  const auto* r = dynamic_cast<const RuleOptimizer*>(&opt);
  return r ? &r->state() : nullptr;
}

float slot_initial_value(const Optimizer& opt, int s) {
  const RuleState* st = rule_state(opt);
  if (!st) return 0.0f;
  const auto& slot = st->rule->slots[static_cast<size_t>(s)];
  // Adagrad's accumulator starts at its hyperparameter, whatever the rule's default says.
  auto it = st->hyper.find("initial_accumulator_value");
  return it != st->hyper.end() && slot.first == "accumulator" ? it->second : slot.second;
}

std::vector<int> emit_rule_update(graph::Graph& g, const Optimizer& opt, const std::string& name, int variable,
                                  int gradient, const std::vector<int>& slots, int control, bool zero_grad) {
  const RuleState& st = *rule_state(opt);
  const graph::UpdateConfig& c = opt.config();
  graph::OpBuilder b{g, nullptr, name};
  graph::Attrs lr_at, step_at;
  lr_at.step_value = 0;
  step_at.step_value = 1;
  const int lr = b.add(graph::Op::StepValue, {}, lr_at);
  const int step = b.add(graph::Op::StepValue, {}, step_at);
  int grad = gradient;
  int apply = -1;
  if (control >= 0) {  // StepControl's [apply, factor]: the factor unscales and clips globally
    grad = ops::binary(b, BinaryFn::multiply, grad, ops::slice(b, control, 0, 1, 1));
    apply = ops::compare(b, BinaryFn::greater, ops::slice(b, control, 0, 0, 1), ops::scalar(b, 0.0f, control));
  }
  if (c.clipvalue > 0.0f) grad = ops::unary(b, UnaryFn::clip, grad, -c.clipvalue, c.clipvalue);
  if (c.clipnorm > 0.0f) {  // Keras: g * clipnorm / max(||g||, clipnorm)
    const Shape s = g[grad].shape;
    std::vector<int> all(static_cast<size_t>(s.rank()));
    for (int i = 0; i < s.rank(); ++i) all[static_cast<size_t>(i)] = i;
    const int norm =
        ops::unary(b, UnaryFn::sqrt, ops::reduce(b, ReduceFn::sum, ops::unary(b, UnaryFn::square, grad), all, false));
    const int denom = ops::binary(b, BinaryFn::maximum, norm, ops::scalar(b, c.clipnorm, norm));
    grad = ops::binary(b, BinaryFn::divide, ops::mul_scalar(b, grad, c.clipnorm), denom);
  }
  int var = variable;
  if (c.weight_decay > 0.0f)  // decoupled, before the update: w -= w * weight_decay * lr
    var = ops::binary(b, BinaryFn::subtract, var,
                      ops::binary(b, BinaryFn::multiply, ops::mul_scalar(b, var, c.weight_decay), lr));
  const UpdateValues v = st.rule->update(b, UpdateOperands{var, grad, slots, lr, step, st.hyper});
  auto gated = [&](int next, int old) { return apply >= 0 ? ops::where(b, apply, next, old) : next; };
  std::vector<int> sinks;
  sinks.push_back(b.add(graph::Op::Assign, {variable, gated(v.variable, variable)}));
  for (size_t s = 0; s < slots.size(); ++s)
    sinks.push_back(b.add(graph::Op::Assign, {slots[s], gated(v.slots[s], slots[s])}));
  if (zero_grad)
    sinks.push_back(
        b.add(graph::Op::Assign, {gradient, ops::broadcast_to(b, ops::scalar(b, 0.0f, gradient), g[gradient].shape)}));
  return sinks;
}

}  // namespace tk::nn
