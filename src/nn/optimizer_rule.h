// Optimizers described once, written in the general tensor ops: an OptimizerRule names the Keras class, its
// hyperparameters (Keras' config keys, defaults), its slots (Keras' variable names, initial values) and builds one
// variable's update from ops (graph/tensor_ops.h). Everything else reads the rule: the training program
// (ProgramCache::add_update emits the update's ops and an Assign per variable and slot), the memory plan (the ops are
// in the graph), the Keras file reader and writer (class, config keys, slot order) and tk::optimizers::get(name).
// Adding an optimizer is its own file under src/nn/optimizers/ (the rule and its factory), a line in
// include/trainkit/nn/optimizers.h and its test.
//
//   // src/nn/optimizers/lion.cpp
//   const OptimizerRule& lion_rule() {
//     static const OptimizerRule r{"Lion", {{"beta_1", 0.9f}, {"beta_2", 0.99f}}, 1e-4f, {{"momentum", 0.0f}}, update};
//     return r;
//   }
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "trainkit/nn/optimizers.h"

namespace tk::nn {

// One variable's update, given as graph values: the variable, its (clipped) gradient, its slots, this step's learning
// rate and Keras' local_step (the update count + 1), both float32 scalars.
struct UpdateOperands {
  int variable, gradient;
  std::vector<int> slots;
  int learning_rate, step;
  const std::map<std::string, float>& hyper;  // the optimizer's hyperparameters by Keras name
};
// The new values of the variable and of each slot, in slot order.
struct UpdateValues {
  int variable;
  std::vector<int> slots;
};

struct OptimizerRule {
  std::string keras_class;                           // "Adagrad": Keras' class name, and get()'s name
  std::vector<std::pair<std::string, float>> hyper;  // Keras config keys and defaults, in Keras' order
  float learning_rate = 0.001f;                      // Keras' default
  std::vector<std::pair<std::string, float>> slots;  // Keras' slot names and initial values, in Keras' order
  std::function<UpdateValues(graph::OpBuilder&, const UpdateOperands&)> update;
  // Validates hyperparameters (an InvalidArgument naming the optimizer and the value); may be empty.
  std::function<void(const std::map<std::string, float>&)> check = nullptr;
};

// Each optimizer file defines its rule's accessor; the list in optimizer_rule.cpp (kRules) names them: what get(),
// the Keras reader and find_rule() see.
const OptimizerRule& adagrad_rule();   // src/nn/optimizers/adagrad.cpp
const OptimizerRule& adadelta_rule();  // src/nn/optimizers/adadelta.cpp
const OptimizerRule& lion_rule();      // src/nn/optimizers/lion.cpp
// The rule of a Keras class name (case-insensitive), or nullptr.
const OptimizerRule* find_rule(const std::string& name);
std::vector<std::string> rule_names();

// The options every optimizer takes (Keras' base optimizer arguments), checked and stored (optimizers.cpp).
void apply_common(Optimizer& opt, const std::string& name, float learning_rate, const optimizers::Common& common);

// An optimizer running `rule` with these hyperparameters (missing keys take the defaults; an unknown key is an
// InvalidArgument) and common options.
OptimizerPtr make_rule_optimizer(const OptimizerRule& rule, std::map<std::string, float> hyper, float learning_rate,
                                 const optimizers::Common& common);

// What the training program needs from an optimizer made by make_rule_optimizer (nullptr for the fused ones).
struct RuleState {
  const OptimizerRule* rule;
  std::map<std::string, float> hyper;
};
const RuleState* rule_state(const Optimizer& opt);

// The initial value of slot `s` (Adagrad's accumulator: initial_accumulator_value); 0 for the fused optimizers.
float slot_initial_value(const Optimizer& opt, int s);

// Emits the update of one variable: clipvalue, clipnorm, decoupled weight decay (Keras' base optimizer order), the
// rule, and, when `control` (a StepControl) is given, its gate (the step skipped when a gradient is not finite) and
// gradient factor; then one Assign per variable and slot. With zero_grad, the gradient (an accumulator) is cleared
// too. Returns the Assign nodes (the program's sinks).
std::vector<int> emit_rule_update(graph::Graph& g, const Optimizer& opt, const std::string& name, int variable,
                                  int gradient, const std::vector<int>& slots, int control, bool zero_grad);

}  // namespace tk::nn
