// Every optimizer described once: an OptimizerRule names the Keras class, its hyperparameters (Keras' config keys,
// defaults), its per-variable slots (Keras' variable names, order, initial values, shapes), its optimizer-level
// variables (Nadam's u_product) and how one step runs: either `update`, written in the general ops
// (graph/tensor_ops.h), or `fused`, a fused update op with its own kernels (SGD, Adam, RMSprop: `configure` writes the
// hyperparameters into the op's UpdateConfig). Everything else reads the rule and nothing else: tk::optimizers::get
// (and the CLI's --optimizer), the training program (ProgramCache::add_update emits the fused op, or the rule's ops
// and an Assign per variable, slot and optimizer variable), the memory plan (which update ops hold slots), the Keras
// config reader and writer (class, config keys), the weights reader and writer (slot order and presence, optimizer
// variables) and the training-state file (resume, backups). kRules in optimizer_rule.cpp lists the rules; a class
// that is not there is an error naming the ones that are, never a silent default.
//
// Adding an optimizer is its own file under src/nn/optimizers/ (the rule and its factory), a line in kRules, its
// options and factory in include/trainkit/nn/optimizers.h, and its test:
//
//   // src/nn/optimizers/lion.cpp
//   const OptimizerRule& lion_rule() {
//     static const OptimizerRule r{.keras_class = "Lion", .hyper = {{"beta_1", 0.9f}, {"beta_2", 0.99f}},
//                                  .learning_rate = 1e-4f, .slots = {{"momentum"}}, .update = update};
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

using Hypers = std::map<std::string, float>;  // an optimizer's hyperparameters by Keras name (booleans: 0 or 1)

// One variable's update, given as graph values: the variable, its (clipped) gradient, its slots, this step's learning
// rate and Keras' local_step (the update count + 1), both float32 scalars, and the optimizer variables' values for
// this step (already advanced by their `next`).
struct UpdateOperands {
  int variable, gradient;
  std::vector<int> slots;
  int learning_rate, step;
  const Hypers& hyper;
  std::vector<int> optimizer_variables;
};
// The new values of the variable and of each slot, in slot order.
struct UpdateValues {
  int variable;
  std::vector<int> slots;
};

struct Hyper {
  std::string key;       // Keras' config key
  float value = 0.0f;    // Keras' default
  bool boolean = false;  // a Keras bool (nesterov, centered): written as true/false, read from a bool or a number
  bool fixed = false;    // trainkit runs only the default (Adam's amsgrad = False): another value is Unsupported
};

struct Slot {
  std::string name;               // Keras' variable name ("momentum")
  float initial = 0.0f;           // its value before the first step
  std::string initial_from = {};  // or this hyperparameter's value (Adagrad's initial_accumulator_value)
  // Keras' add_optimizer_variables call that makes it: the slots of one group are interleaved per variable (Adam: m0,
  // v0, m1, v1), the groups follow each other (RMSprop: every velocity, then every momentum).
  int group = 0;
  // Whether Keras makes it for these hyperparameters (SGD's momentum: only when momentum != 0); null: always. trainkit
  // holds exactly the slots Keras makes: one it does not is not allocated, not planned, not in .keras files nor in
  // training states, and the fused op takes no input for it (graph::update_slot_mask, which must agree: checked when
  // an optimizer is made). Only a fused op's slots may be conditional.
  std::function<bool(const Hypers&)> in_keras = nullptr;
  // Its shape for a variable of shape `var` (Adafactor's factored moments); null: the variable's.
  std::function<Shape(const Shape& var)> shape = nullptr;
  // Its dtype in Keras files for a variable of shape `var` (Adafactor's int32 placeholders); null: float32. trainkit
  // keeps float32 and converts when writing and reading.
  std::function<DType(const Shape& var)> keras_dtype = nullptr;
};

// An optimizer-level variable (Keras: one backend.Variable of the optimizer, not per model variable): a float32
// scalar, advanced once per step before the variables' updates, which read its new value. Saved after the slots (Keras'
// order) in .keras files and in training states.
struct OptimizerVariable {
  std::string name;  // Keras' attribute ("u_product")
  float initial = 0.0f;
  // This step's value from the last step's `old` (scalars; `step` is Keras' local_step).
  std::function<int(graph::OpBuilder&, int old, int step, const Hypers&)> next;
};

struct OptimizerRule {
  std::string keras_class;       // "Adagrad": Keras' class name, and get()'s name (case-insensitive)
  std::vector<Hyper> hyper;      // in Keras' get_config order
  float learning_rate = 0.001f;  // Keras' default
  float weight_decay = 0.0f;     // Keras' default (AdamW: 0.004)
  std::vector<Slot> slots;       // in trainkit's order (the update's, the fused op's inputs)
  std::vector<OptimizerVariable> variables = {};
  // How a step runs, one of: the update in general ops ...
  std::function<UpdateValues(graph::OpBuilder&, const UpdateOperands&)> update = nullptr;
  // ... or a fused update op, whose kernels read the UpdateConfig `configure` fills (Assign: none).
  graph::Op fused = graph::Op::Assign;
  std::function<void(graph::UpdateConfig&, const Hypers&)> configure = nullptr;
  // Validates hyperparameters (an InvalidArgument naming the optimizer and the value); may be empty.
  std::function<void(const Hypers&)> check = nullptr;
};

// Each optimizer file defines its rule's accessor; the list in optimizer_rule.cpp (kRules) names them: what get(),
// the Keras reader and find_rule() see.
const OptimizerRule& sgd_rule();        // src/nn/optimizers/sgd.cpp
const OptimizerRule& adam_rule();       // src/nn/optimizers/adam.cpp
const OptimizerRule& adamw_rule();      // src/nn/optimizers/adam.cpp
const OptimizerRule& rmsprop_rule();    // src/nn/optimizers/rmsprop.cpp
const OptimizerRule& adagrad_rule();    // src/nn/optimizers/adagrad.cpp
const OptimizerRule& adadelta_rule();   // src/nn/optimizers/adadelta.cpp
const OptimizerRule& lion_rule();       // src/nn/optimizers/lion.cpp
const OptimizerRule& nadam_rule();      // src/nn/optimizers/nadam.cpp
const OptimizerRule& adafactor_rule();  // src/nn/optimizers/adafactor.cpp
// A tk::Error unless the rule says everything its readers need (one way to run, a configure for a fused op, named
// slots and variables...): every rule in kRules is checked the first time the list is read.
void check_rule(const OptimizerRule& rule);
// The rule of a Keras class name (case-insensitive), or nullptr.
const OptimizerRule* find_rule(const std::string& name);
// Every rule, in kRules' order (each checked for a complete description the first time).
std::vector<const OptimizerRule*> all_rules();
std::vector<std::string> rule_names();
// "sgd, adam, ..." (lower case): what error messages and --help list.
std::string rule_list();

// An InvalidArgument "<opt>: <what> must be <range>, got <v>" unless ok: the rules' checks.
void require(bool ok, const std::string& opt, const std::string& what, float v, const std::string& range);

// The options every optimizer takes (Keras' base optimizer arguments), checked and stored (optimizers.cpp).
void apply_common(Optimizer& opt, const std::string& name, float learning_rate, const optimizers::Common& common);

// An optimizer running `rule` with these hyperparameters (missing keys take the defaults; an unknown key is an
// InvalidArgument) and common options.
OptimizerPtr make_rule_optimizer(const OptimizerRule& rule, Hypers hyper, float learning_rate,
                                 const optimizers::Common& common);
// With Keras' defaults (weight_decay included).
OptimizerPtr make_rule_optimizer(const OptimizerRule& rule);

// The rule an optimizer runs and its hyperparameters (every optimizer made here has one).
struct RuleState {
  const OptimizerRule* rule;
  Hypers hyper;
  // The rule's slots this optimizer holds (in_keras for its hyperparameters), in the rule's order. "Slot s" everywhere
  // outside this file (slots_per_variable, the slot functions below, ProgramCache, training states, .keras files)
  // means held slot s: the rule's slot held[s].
  std::vector<size_t> held;
};
const RuleState& rule_state(const Optimizer& opt);
// Whether its update is written in the general ops (emit_rule_update), not a fused op.
bool emits_ops(const Optimizer& opt);
// Whether `op` is one of the rules' fused update ops, or their grouping (MultiUpdate).
bool is_fused_update(graph::Op op);

// The rule's description of held slot `s` (its Keras name...).
const Slot& held_slot(const Optimizer& opt, int s);
// The initial value of slot `s` (Adagrad's accumulator: initial_accumulator_value).
float slot_initial_value(const Optimizer& opt, int s);
// The shape of slot `s` of a variable of shape `var`.
Shape slot_shape(const Optimizer& opt, int s, const Shape& var);
// (trainable weight index, held slot index) in Keras' order for `n` trainable weights: groups, then variables, then
// slots (the held ones: those Keras makes for these hyperparameters).
std::vector<std::pair<size_t, size_t>> keras_slot_order(const Optimizer& opt, size_t n);
// The dtype of slot `s` in Keras files (float32 unless the rule says otherwise).
DType slot_keras_dtype(const Optimizer& opt, int s, const Shape& var);
// The optimizer variables' initial values, in the rule's order.
std::vector<float> optimizer_variable_initial_values(const Optimizer& opt);

// Emits the update of one variable: clipvalue, clipnorm, decoupled weight decay (Keras' base optimizer order), the
// rule, and, when `control` (a StepControl) is given, its gate (the step skipped when a gradient is not finite) and
// gradient factor; then one Assign per variable and slot. With zero_grad, the gradient (an accumulator) is cleared
// too. The optimizer variables (`optimizer_variables`: their storage, null when planning) are advanced once per
// graph, by the first update emitted into it. Returns the Assign nodes (the program's sinks).
std::vector<int> emit_rule_update(graph::Graph& g, const Optimizer& opt, const std::string& name, int variable,
                                  int gradient, const std::vector<int>& slots, int control, bool zero_grad,
                                  std::vector<Tensor>* optimizer_variables);

}  // namespace tk::nn
