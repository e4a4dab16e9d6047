#include "nn/optimizer_rule.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "graph/op.h"
#include "graph/tensor_ops.h"
#include "nn/compiler/losses.h"
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

// Every optimizer: one line each. A class not here is unknown everywhere (get(), the Keras reader), loudly.
constexpr const OptimizerRule& (*kRules[])() = {sgd_rule,      adam_rule, adamw_rule, rmsprop_rule,  adagrad_rule,
                                                adadelta_rule, lion_rule, nadam_rule, adafactor_rule};

}  // namespace

void check_rule(const OptimizerRule& r) {
  auto bad = [&](const std::string& what) {
    throw Error("optimizer rule '" + r.keras_class + "' is incomplete: " + what + " (src/nn/optimizer_rule.h)");
  };
  if (r.keras_class.empty()) bad("no Keras class name");
  if ((r.update != nullptr) == (r.fused != graph::Op::Assign)) bad("give exactly one of update and fused");
  if (r.fused != graph::Op::Assign && !r.configure) bad("a fused op needs configure");
  if (r.fused != graph::Op::Assign && !r.variables.empty()) bad("a fused op cannot advance optimizer variables");
  for (const Slot& s : r.slots) {
    if (s.name.empty()) bad("a slot without a Keras name");
    if (s.in_keras && r.fused == graph::Op::Assign)
      bad("slot '" + s.name + "' is conditional (in_keras) but the update in ops takes every slot");
    if (!s.initial_from.empty() &&
        std::none_of(r.hyper.begin(), r.hyper.end(), [&](const Hyper& h) { return h.key == s.initial_from; }))
      bad("slot '" + s.name + "' starts from unknown hyperparameter '" + s.initial_from + "'");
  }
  for (const OptimizerVariable& v : r.variables)
    if (v.name.empty() || !v.next) bad("an optimizer variable needs a name and its next value");
}

namespace {

const std::vector<const OptimizerRule*>& rules() {
  static const std::vector<const OptimizerRule*> all = [] {
    std::vector<const OptimizerRule*> out;
    for (auto rule : kRules) {
      check_rule(rule());
      out.push_back(&rule());
    }
    return out;
  }();
  return all;
}

class RuleOptimizer final : public Optimizer {
 public:
  RuleOptimizer(const OptimizerRule& rule, Hypers hyper) : state_{&rule, std::move(hyper), {}} {
    config().update_op = rule.fused;  // Assign: not a fused update op, ProgramCache emits the rule's ops
    if (rule.configure) rule.configure(config(), state_.hyper);
    int mask = 0;
    for (size_t s = 0; s < rule.slots.size(); ++s)
      if (!rule.slots[s].in_keras || rule.slots[s].in_keras(state_.hyper)) {
        state_.held.push_back(s);
        mask |= 1 << s;
      }
    // The fused op's inputs are the slots its config uses: they must be the ones held (one description each).
    if (rule.fused != graph::Op::Assign && graph::update_slot_mask(rule.fused, config()) != mask)
      throw Error("optimizer rule '" + rule.keras_class + "': its slots' in_keras (mask " + std::to_string(mask) +
                  ") and the fused op's graph::update_slot_mask (" +
                  std::to_string(graph::update_slot_mask(rule.fused, config())) + ") disagree");
  }
  std::string name() const override { return state_.rule->keras_class; }
  int slots_per_variable() const override { return static_cast<int>(state_.held.size()); }
  const RuleState& state() const { return state_; }

 private:
  RuleState state_;
};

}  // namespace

const OptimizerRule* find_rule(const std::string& name) {
  for (const OptimizerRule* rule : rules())
    if (lower(rule->keras_class) == lower(name)) return rule;
  return nullptr;
}

std::vector<const OptimizerRule*> all_rules() { return rules(); }

std::vector<std::string> rule_names() {
  std::vector<std::string> out;
  for (const OptimizerRule* rule : rules()) out.push_back(rule->keras_class);
  return out;
}

std::string rule_list() {
  std::string out;
  for (const OptimizerRule* rule : rules()) out += (out.empty() ? "" : ", ") + lower(rule->keras_class);
  return out;
}

OptimizerPtr make_rule_optimizer(const OptimizerRule& rule, Hypers hyper, float learning_rate,
                                 const optimizers::Common& common) {
  for (const auto& [k, v] : hyper)
    if (std::none_of(rule.hyper.begin(), rule.hyper.end(), [&](const Hyper& h) { return h.key == k; }))
      throw InvalidArgument(rule.keras_class + ": unknown option '" + k + "'");
  for (const Hyper& h : rule.hyper) {
    hyper.emplace(h.key, h.value);
    const float v = hyper.at(h.key);
    if (!std::isfinite(v))
      throw InvalidArgument(rule.keras_class + ": " + h.key + " must be finite, got " + std::to_string(v));
    if (h.boolean && v != 0.0f && v != 1.0f)
      throw InvalidArgument(rule.keras_class + ": " + h.key + " is a boolean, got " + std::to_string(v));
    if (h.fixed && v != h.value)
      throw Unsupported(rule.keras_class + ": " + h.key + " = " + std::to_string(v) + " is not supported (only " +
                        std::to_string(h.value) + ")");
  }
  if (rule.check) rule.check(hyper);
  auto o = std::make_shared<RuleOptimizer>(rule, std::move(hyper));
  apply_common(*o, rule.keras_class, learning_rate, common);
  return o;
}

OptimizerPtr make_rule_optimizer(const OptimizerRule& rule) {
  optimizers::Common common;
  common.weight_decay = rule.weight_decay;
  return make_rule_optimizer(rule, {}, rule.learning_rate, common);
}

const RuleState& rule_state(const Optimizer& opt) {
  const auto* r = dynamic_cast<const RuleOptimizer*>(&opt);
  if (!r) throw Error("optimizer '" + opt.name() + "' was not made from an optimizer rule (nn/optimizer_rule.h)");
  return r->state();
}

bool emits_ops(const Optimizer& opt) { return rule_state(opt).rule->fused == graph::Op::Assign; }

bool is_fused_update(graph::Op op) {
  if (op == graph::Op::MultiUpdate) return true;
  return std::any_of(rules().begin(), rules().end(),
                     [&](const OptimizerRule* r) { return r->fused != graph::Op::Assign && r->fused == op; });
}

const Slot& held_slot(const Optimizer& opt, int s) {
  const RuleState& st = rule_state(opt);
  return st.rule->slots.at(st.held.at(static_cast<size_t>(s)));
}

float slot_initial_value(const Optimizer& opt, int s) {
  const Slot& slot = held_slot(opt, s);
  return slot.initial_from.empty() ? slot.initial : rule_state(opt).hyper.at(slot.initial_from);
}

Shape slot_shape(const Optimizer& opt, int s, const Shape& var) {
  const Slot& slot = held_slot(opt, s);
  return slot.shape ? slot.shape(var) : var;
}

std::vector<std::pair<size_t, size_t>> keras_slot_order(const Optimizer& opt, size_t n) {
  const RuleState& st = rule_state(opt);
  int groups = 0;
  for (const Slot& s : st.rule->slots) groups = std::max(groups, s.group + 1);
  std::vector<std::pair<size_t, size_t>> order;
  for (int group = 0; group < groups; ++group)
    for (size_t k = 0; k < n; ++k)
      for (size_t s = 0; s < st.held.size(); ++s)
        if (st.rule->slots[st.held[s]].group == group) order.emplace_back(k, s);
  return order;
}

DType slot_keras_dtype(const Optimizer& opt, int s, const Shape& var) {
  const Slot& slot = held_slot(opt, s);
  return slot.keras_dtype ? slot.keras_dtype(var) : DType::f32;
}

std::vector<float> optimizer_variable_initial_values(const Optimizer& opt) {
  std::vector<float> out;
  for (const OptimizerVariable& v : rule_state(opt).rule->variables) out.push_back(v.initial);
  return out;
}

namespace {

// The optimizer variables' values for this step in `g`: made (with their Assigns, appended to `sinks`) by the first
// update emitted into the graph, found by their Variable's name by the others.
std::vector<int> optimizer_variables_now(graph::Graph& g, const OptimizerRule& rule, const Hypers& hyper, int step,
                                         int apply, std::vector<Tensor>* storage, std::vector<int>& sinks) {
  std::vector<int> out;
  for (size_t i = 0; i < rule.variables.size(); ++i) {
    const OptimizerVariable& v = rule.variables[i];
    const std::string name = "optimizer/" + v.name;
    int var = -1;
    for (int id = 0; id < g.size() && var < 0; ++id)
      if (g[id].op == graph::Op::Variable && g[id].name == name) var = id;
    if (var >= 0) {  // advanced already: the value its Assign writes
      int assigned = -1;
      for (int id = 0; id < g.size() && assigned < 0; ++id)
        if (g[id].op == graph::Op::Assign && g[id].inputs[0] == var) assigned = g[id].inputs[1];
      out.push_back(assigned);
      continue;
    }
    var = storage ? g.variable(name, (*storage)[i]) : g.placeholder_variable(name, Shape{}, DType::f32);
    graph::OpBuilder b{g, nullptr, name};
    const int next = v.next(b, var, step, hyper);
    const int value = apply >= 0 ? ops::where(b, apply, next, var) : next;
    sinks.push_back(b.add(graph::Op::Assign, {var, value}));
    out.push_back(value);
  }
  return out;
}

}  // namespace

std::vector<int> emit_rule_update(graph::Graph& g, const Optimizer& opt, const std::string& name, int variable,
                                  int gradient, const std::vector<int>& slots, int control, bool zero_grad,
                                  std::vector<Tensor>* optimizer_variables) {
  const RuleState& st = rule_state(opt);
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
    const int norm =
        ops::unary(b, UnaryFn::sqrt, reduce_all_axes(b, ReduceFn::sum, ops::unary(b, UnaryFn::square, grad)));
    const int denom = ops::binary(b, BinaryFn::maximum, norm, ops::scalar(b, c.clipnorm, norm));
    grad = ops::binary(b, BinaryFn::divide, ops::mul_scalar(b, grad, c.clipnorm), denom);
  }
  int var = variable;
  if (c.weight_decay > 0.0f)  // decoupled, before the update: w -= w * weight_decay * lr
    var = ops::binary(b, BinaryFn::subtract, var,
                      ops::binary(b, BinaryFn::multiply, ops::mul_scalar(b, var, c.weight_decay), lr));
  std::vector<int> sinks;
  const std::vector<int> now = optimizer_variables_now(g, *st.rule, st.hyper, step, apply, optimizer_variables, sinks);
  const UpdateValues v = st.rule->update(b, UpdateOperands{var, grad, slots, lr, step, st.hyper, now});
  auto gated = [&](int next, int old) { return apply >= 0 ? ops::where(b, apply, next, old) : next; };
  sinks.push_back(b.add(graph::Op::Assign, {variable, gated(v.variable, variable)}));
  for (size_t s = 0; s < slots.size(); ++s)
    if (v.slots[s] != slots[s])  // a slot the rule leaves alone (Adafactor's unfactored placeholders) is not written
      sinks.push_back(b.add(graph::Op::Assign, {slots[s], gated(v.slots[s], slots[s])}));
  if (zero_grad)
    sinks.push_back(
        b.add(graph::Op::Assign, {gradient, ops::broadcast_to(b, ops::scalar(b, 0.0f, gradient), g[gradient].shape)}));
  return sinks;
}

}  // namespace tk::nn
