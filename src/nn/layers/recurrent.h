// Keras 3's recurrent layers (SimpleRNN, LSTM, GRU) and the Bidirectional wrapper, as composites of the general ops
// unrolled over the static time axis (nn/layers/recurrent.cpp, bidirectional.cpp). Declared here for the Keras
// config reader and writer (io/keras_layers_rnn.cpp), which read their options and nest their configs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers/context.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

// One recurrent layer's options, whatever its class (the public LSTMOptions etc. map onto it).
struct RecurrentSpec {
  enum class Kind { simple_rnn, lstm, gru } kind = Kind::lstm;
  int64_t units = 0;
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";  // LSTM, GRU
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "orthogonal";
  std::string bias_initializer = "zeros";
  bool unit_forget_bias = true;  // LSTM
  bool reset_after = true;       // GRU
  float dropout = 0.0f, recurrent_dropout = 0.0f;
  uint64_t seed = 0;
  bool return_sequences = false, return_state = false, go_backwards = false, stateful = false, unroll = false;
  bool zero_output_for_mask = false;  // masked steps of a return_sequences output: zeros, else the previous output
  std::string name;
  std::string dtype;
};

class RecurrentLayer final : public Layer, public MaskSupport {
 public:
  // Validates the options: InvalidArgument for bad values, Unsupported for stateful.
  explicit RecurrentLayer(RecurrentSpec spec);
  const RecurrentSpec& spec() const { return spec_; }
  int64_t gates() const;          // G: 1, 4 (i, f, c, o) or 3 (z, r, h)
  std::string cell_name() const;  // "simple_rnn_cell", "lstm_cell", "gru_cell": the cell's group in Keras files
  std::string class_name() const override;
  LayerConfig get_config() const override;
  std::vector<KerasGroup> keras_groups() const override { return {{"vars", name}, {"cell/vars", cell_name()}}; }
  // Inputs: the sequence, then Keras' initial_state (h, or h and c for an LSTM), each (N, units); without them the
  // states start at zero. Outputs: the output, then with return_state the final states (Keras' [output, h(, c)]).
  std::string state_argument() const override { return "initial_state"; }
  int64_t state_count() const { return spec_.kind == RecurrentSpec::Kind::lstm ? 2 : 1; }
  Shape build(const std::vector<Shape>& input_shapes) override;
  std::vector<Shape> build_outputs(const std::vector<Shape>& input_shapes) override;
  int call(CallContext& ctx, const std::vector<int>& inputs) const override;
  std::vector<int> call_outputs(CallContext& ctx, const std::vector<int>& inputs) const override;
  // Keras masks: masked steps keep the previous state; the output's mask is the input's with return_sequences.
  int compute_mask(CallContext& ctx, const std::vector<int>& inputs, int output) const override;

  // (N, steps, features) checked; the output shape.
  Shape output_shape(const Shape& input, const std::string& owner) const;
  // The initial states given (input_shapes[first..first + count)) checked against (None, units): InvalidArgument
  // naming `owner` for another count or shape.
  void check_states(const std::vector<Shape>& input_shapes, size_t first, size_t count, const std::string& owner) const;
  // Creates kernel, recurrent_kernel and bias through `add` (a layer's add_weight) under Keras group `group`.
  using AddWeight = std::function<Weight&(const std::string& what, Shape shape, const std::string& initializer)>;
  void create_weights(const AddWeight& add, int64_t features, const std::string& group) const;
  int64_t weight_count() const { return spec_.use_bias ? 3 : 2; }
  // Emits the layer's ops on x (N, T, D) with weights w[0..weight_count()) (kernel, recurrent_kernel, bias).
  // flip: a return_sequences output's steps in reverse (Bidirectional's ops.flip of the backward output).
  // mask: the input's Keras mask (N, T) or -1; zero_output: masked steps of the sequence output are zeros (Keras'
  // zero_output_for_mask) rather than the previous output. initial: the states to start from (state_count() values
  // (N, units)), or empty for zeros; final: when non-null, receives the states after the last (unmasked) step.
  int run(CallContext& ctx, int x, const Weight* w, const std::string& owner, bool flip, int mask = -1,
          bool zero_output = false, const std::vector<int>& initial = {}, std::vector<int>* final = nullptr) const;

 private:
  RecurrentSpec spec_;
  int64_t features_ = 0;
};

// The Keras mask a recurrent call computes with: the sequence's, or none when initial states are given (Keras 3 passes
// `mask` only to calls with one tensor argument).
int computing_mask(const CallContext& ctx, const std::vector<int>& inputs);

// Keras' Bidirectional over a RecurrentLayer: forward_<name> and backward_<name> (go_backwards flipped, or the given
// backward layer), each with its own weights (this layer's: the forward's three, then the backward's), merged.
class BidirectionalLayer final : public Layer, public MaskSupport {
 public:
  // `layer` is only read for its options (as Keras, which copies it through its config); InvalidArgument for a
  // layer that is not a SimpleRNN/LSTM/GRU, a bad merge_mode or a backward layer that does not match.
  BidirectionalLayer(const LayerPtr& layer, const LayerPtr& backward_layer, std::string merge_mode, std::string name);
  const RecurrentLayer& forward_layer() const { return *forward_; }
  const RecurrentLayer& backward_layer() const { return *backward_; }
  const std::string& merge_mode() const { return merge_mode_; }
  std::string class_name() const override { return "Bidirectional"; }
  LayerConfig get_config() const override { return LayerConfig{}.set("merge_mode", merge_mode_); }
  std::vector<KerasGroup> keras_groups() const override;
  // Inputs: the sequence, then Keras' initial_state: the forward layer's states, then the backward's. Outputs: the
  // merged output, then with return_state the forward's final states and the backward's (Keras' order).
  std::string state_argument() const override { return "initial_state"; }
  Shape build(const std::vector<Shape>& input_shapes) override;
  std::vector<Shape> build_outputs(const std::vector<Shape>& input_shapes) override;
  int call(CallContext& ctx, const std::vector<int>& inputs) const override;
  std::vector<int> call_outputs(CallContext& ctx, const std::vector<int>& inputs) const override;
  int compute_mask(CallContext& ctx, const std::vector<int>& inputs, int output) const override;

 private:
  std::shared_ptr<RecurrentLayer> forward_, backward_;
  std::string merge_mode_;
  int64_t features_ = 0;
};

}  // namespace tk::nn
