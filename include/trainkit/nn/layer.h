// Layers and symbolic tensors, as in Keras 3.
//
//   // Sequential
//   tk::Sequential model({tk::layers::Input({784}), tk::layers::Dense(256, "relu"), tk::layers::Dense(10)});
//   // Functional: a layer called on symbolic tensors returns a symbolic tensor
//   tk::KerasTensor in = tk::Input({784});
//   tk::KerasTensor h = tk::layers::Dense(64, "relu")(in);
//   model.get_layer("dense")->trainable = false;   // freeze
//   // A layer with several outputs returns them all from call_all, as Keras returns a list
//   std::vector<tk::KerasTensor> enc = tk::layers::LSTM(64, {.return_state = true}).call_all({x});  // [out, h, c]
//   // Initial states follow the sequence among the inputs (Keras' initial_state=[h, c])
//   tk::KerasTensor dec = tk::layers::LSTM(64, {.return_sequences = true})({y, enc[1], enc[2]});
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/nn/constraints.h"
#include "trainkit/nn/regularizers.h"

namespace tk {

namespace nn {
struct CallContext;  // graph-building state; defined in src/nn (layers emit graph ops through it)
}

class Layer;
class Model;
struct NestedCall;

// A layer's constructor arguments under Keras' config names and value types (what Keras' get_config() holds
// besides name, trainable and dtype), in Keras' order. Saving (.keras files) writes them as JSON.
struct LayerConfig {
  struct Value {
    enum Kind { boolean, integer, number, string, integers, numbers } kind = boolean;
    bool b = false;
    int64_t i = 0;
    double d = 0.0;
    std::string s;
    std::vector<int64_t> ints;
    std::vector<double> floats;  // float32 values as the decimals Keras would write (set_floats)
  };
  std::vector<std::pair<std::string, Value>> items;
  LayerConfig& set(const std::string& key, bool v);
  LayerConfig& set(const std::string& key, int64_t v);
  LayerConfig& set(const std::string& key, std::string v);
  LayerConfig& set(const std::string& key, const char* v) { return set(key, std::string(v)); }
  LayerConfig& set(const std::string& key, std::vector<int64_t> v);
  // A float32 option as the decimal Keras would write (0.99f -> 0.99, not 0.9900000095367432).
  LayerConfig& set_float(const std::string& key, float v);
  LayerConfig& set_floats(const std::string& key, const std::vector<float>& v);
  const Value* find(const std::string& key) const {
    for (const auto& [k, v] : items)
      if (k == key) return &v;
    return nullptr;
  }
};

// A symbolic tensor: output `index` of a layer call (its node), with its shape (batch dimension None). Keras'
// keras_history is (layer, node index, tensor index): a layer with several outputs (an LSTM with return_state) makes
// one node whose outputs are told apart by `index`.
struct KerasTensor {
  struct NodeData {
    std::shared_ptr<Layer> layer;     // the layer that produced it (an InputLayer for inputs)
    std::vector<KerasTensor> inputs;  // what the layer was called on
    std::vector<Shape> shapes;        // one per output of the call: (None, ...)
    // The call's keyword options that are not tensors (MultiHeadAttention's use_causal_mask), as Keras' inbound
    // node records them; Layer::check_call_options accepted them.
    LayerConfig call_options;
    // Set on the nodes a model called like a layer made (tk::call_model): which call they belong to.
    std::shared_ptr<const NestedCall> nested;
  };
  std::shared_ptr<NodeData> node;
  int index = 0;  // which output of the node
  const Shape& shape() const { return node->shapes.at(static_cast<size_t>(index)); }
};

// A model called like a layer on symbolic tensors (Keras: `x = base_model(inputs, training=False)`, the fine-tuning
// pattern). trainkit calls the model's own layers on the caller's tensors, so the calling model's graph holds every
// op (planning, autodiff and fusion see them all) and trains the same weights; this record, shared by the nodes the
// call made, says which model they came from, so that a saved file nests them again as Keras does.
struct NestedCall {
  std::shared_ptr<const Model> model;  // the model called (its own Inputs and graph stay as they were)
  std::vector<KerasTensor> inputs;     // what it was called on
  // What the call returned, one per model output: (node, output index); not KerasTensors, which would own the nodes
  // that own this record.
  std::vector<std::pair<const KerasTensor::NodeData*, int>> outputs;
  // Keras' training= argument of the call, recorded and written back. Like Keras 3, which runs a graph with the
  // calling model's mode over a recorded one (keras/src/models/functional.py, operation_fn), the layers run as the
  // calling model does: what keeps a fine-tuned base's BatchNormalization in inference mode is freezing it
  // (trainable = false), as in Keras 3.
  std::optional<bool> training;
};

// A weight of a layer: persistent storage the programs read and the optimizer updates in place.
struct Weight {
  std::string name;  // "dense/kernel"
  Tensor value;      // e.g. (in, units) for a Dense kernel
  bool trainable;    // false for statistics that are not learned by gradient
  uint64_t id = 0;   // unique in the process: optimizer slots and accumulators are keyed by it
  // The variable's dtype in Keras files where Keras' is not float32 (Normalization's int32 count): held as float32
  // here, converted when read and written.
  DType file_dtype = DType::f32;
  // The group under the layer's own group in Keras 3 weights files: "vars", or a sub-object's
  // ("cell/vars" for an LSTM, "query_dense/vars" for MultiHeadAttention). Index = order among the layer's weights
  // of the same group.
  std::string keras_vars = "vars";
};

// A group Keras writes under a layer's group for one of its (sub-)objects, with its "name" attribute.
struct KerasGroup {
  std::string path;  // "vars", "cell/vars", "forward_layer/cell/vars"
  std::string name;  // "lstm_cell"
};

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  explicit Layer(std::string name_prefix, std::string name = {});
  virtual ~Layer() = default;

  std::string name;
  bool trainable = true;  // false: no gradients, no optimizer state, weights never change in fit

  // Keras' <key>_regularizer options (trainkit/nn/regularizers.h), by the option's prefix: "kernel", "bias",
  // "recurrent" (the recurrent kernel), "depthwise", "pointwise", "embeddings", "gamma", "beta", "alpha". A key whose
  // weight the layer does not have (a bias with use_bias = false) adds nothing, as in Keras; an unknown key is an
  // InvalidArgument when the model is traced.
  std::map<std::string, Regularizer> regularizers;
  // Keras' activity_regularizer: r(output) / batch size added to the loss.
  std::optional<Regularizer> activity_regularizer;
  // The regularizer of this layer's weight `w` (by the keys above), or null.
  const Regularizer* regularizer_of(const Weight& w) const;
  // Keras' <key>_constraint options (trainkit/nn/constraints.h), by the same keys as the regularizers: applied to the
  // weight after each optimizer step.
  std::map<std::string, Constraint> constraints;
  // The constraint of this layer's weight `w`, or null.
  const Constraint* constraint_of(const Weight& w) const;

  // Keras' dtype policy (trainkit/nn/mixed_precision.h): "float32", "mixed_float16" or "mixed_bfloat16". Taken
  // from the global policy when the layer is made; a model's set_dtype_policy changes it for layers that have
  // no policy of their own.
  const std::string& dtype_policy() const { return dtype_policy_; }
  // The layer's own policy (Keras' dtype= argument), e.g. "float32" for an output layer under a mixed policy.
  // InvalidArgument for an unknown name; a model compiled before the change refuses to run (compile again).
  void set_dtype_policy(const std::string& policy);
  bool has_own_dtype_policy() const { return own_dtype_policy_; }
  // Layers whose math stays float32 under any policy (BatchNormalization, as Keras): their inputs are cast to
  // float32 and their output back to the policy's compute dtype.
  virtual bool computes_in_float32() const { return false; }

  virtual std::string class_name() const = 0;
  // Keras' config of this layer (layer-specific keys only); empty for layers without options.
  virtual LayerConfig get_config() const { return {}; }
  // Every "vars" group Keras 3 writes for this layer, its sub-layers' too (empty ones included: Keras' loader
  // looks for them); the first is the layer's own "vars". Layers with nested Keras objects (LSTM's cell,
  // MultiHeadAttention's dense layers) override it and set Weight::keras_vars.
  virtual std::vector<KerasGroup> keras_groups() const { return {{"vars", name}}; }
  // Number of inputs the layer takes (-1 = two or more, e.g. Add). A layer with a state_argument() takes more.
  virtual int arity() const { return 1; }
  // Keras' call keyword argument whose list holds the inputs after the first (the recurrent layers' and
  // Bidirectional's `initial_state`); empty: none. build() checks how many there are.
  virtual std::string state_argument() const { return {}; }
  // The names of the tensor arguments of the layer's Keras call, in its signature's order, for layers whose call
  // takes named tensors (MultiHeadAttention: query, value, key); the inputs are a prefix of them. Empty: Keras' one
  // `inputs` argument (a tensor or a list). Keras' inbound nodes pass these as args or kwargs.
  virtual std::vector<std::string> call_arguments() const { return {}; }
  // Checks a call's keyword options (Keras' call kwargs that are not tensors): InvalidArgument naming the layer for
  // one it does not take. By default a layer takes none.
  virtual void check_call_options(const LayerConfig& options) const;
  // Checks input shapes (batch None), creates weights on first call, returns the output shape.
  virtual Shape build(const std::vector<Shape>& input_shapes) = 0;
  // Emits the layer's ops for concrete shapes; returns the output value id.
  virtual int call(nn::CallContext& ctx, const std::vector<int>& inputs) const = 0;
  // A layer with several outputs (Keras returns a list: an LSTM with return_state gives [output, h, c]) overrides
  // these two: every output's shape, and every output's value; by default build()'s and call()'s one.
  virtual std::vector<Shape> build_outputs(const std::vector<Shape>& input_shapes) { return {build(input_shapes)}; }
  virtual std::vector<int> call_outputs(nn::CallContext& ctx, const std::vector<int>& inputs) const {
    return {call(ctx, inputs)};
  }

  // The call's one output; InvalidArgument for a layer with several (take them with call_all).
  KerasTensor operator()(const KerasTensor& x);
  KerasTensor operator()(const std::vector<KerasTensor>& xs);
  // Called with keyword options (Keras' `mha(q, v, use_causal_mask=True)`), checked by check_call_options; the
  // layer's call() reads them from its CallContext.
  KerasTensor operator()(const std::vector<KerasTensor>& xs, const LayerConfig& call_options);
  // Every output of the call, in Keras' order (the list Keras returns): one for most layers.
  std::vector<KerasTensor> call_all(const std::vector<KerasTensor>& xs, const LayerConfig& call_options = {});

  std::vector<Weight>& weights() { return weights_; }
  const std::vector<Weight>& weights() const { return weights_; }
  int64_t count_params() const;
  bool built() const { return built_; }

 protected:
  Weight& add_weight(const std::string& what, Shape shape, const std::string& initializer, bool trainable = true);
  std::vector<Weight> weights_;
  bool built_ = false;

 private:
  friend class Model;
  std::string dtype_policy_;
  bool own_dtype_policy_ = false;
};

// A shared layer handle that can be called like a Keras layer: Dense(64, "relu")(x).
class LayerPtr : public std::shared_ptr<Layer> {
 public:
  LayerPtr() = default;
  template <typename T>
  requires std::is_base_of_v<Layer, T> LayerPtr(std::shared_ptr<T> p)
      : std::shared_ptr<Layer>(std::move(p)) {}  // NOLINT: implicit like shared_ptr
  KerasTensor operator()(const KerasTensor& x) const { return (**this)(x); }
  KerasTensor operator()(const std::vector<KerasTensor>& xs) const { return (**this)(xs); }
  KerasTensor operator()(const std::vector<KerasTensor>& xs, const LayerConfig& call_options) const {
    return (**this)(xs, call_options);
  }
  std::vector<KerasTensor> call_all(const std::vector<KerasTensor>& xs, const LayerConfig& call_options = {}) const {
    return (*this)->call_all(xs, call_options);
  }
};

// Gives `layer` its own dtype policy and returns it, for lists: Sequential({..., with_dtype(Dense(10), "float32")}).
LayerPtr with_dtype(LayerPtr layer, const std::string& policy);

// Resets Keras-style automatic layer names ("dense", "dense_1", ...) and the global seed stream.
void clear_session();

namespace utils {
// Fixes weight initialization, shuffling and dropout for everything created afterwards (Keras'
// keras.utils.set_random_seed).
void set_random_seed(uint64_t seed);
}  // namespace utils

}  // namespace tk
