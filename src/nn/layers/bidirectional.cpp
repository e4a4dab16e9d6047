// Keras 3's Bidirectional (keras/src/layers/rnn/bidirectional.py): a forward copy of the wrapped recurrent layer and
// a backward one (go_backwards flipped, or the given backward_layer), both on the same input; with return_sequences
// the backward output is flipped back to time order (here: its steps are concatenated in time order, no flip op),
// then merged: concat (last axis), sum, ave ((y + y_rev) / 2) or mul. initial_state: its first half starts the forward
// layer, its second half the backward; return_state: [output, forward states..., backward states...]. Keras 3 files
// keep each direction's weights under forward_layer/cell/vars and backward_layer/cell/vars.
#include "graph/tensor_ops.h"
#include "nn/layers/recurrent.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk::nn {
namespace {

// Keras' utils.removeprefix.
std::string without_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

}  // namespace

BidirectionalLayer::BidirectionalLayer(const LayerPtr& layer, const LayerPtr& backward, std::string merge_mode,
                                       std::string given_name)
    : Layer("bidirectional", std::move(given_name)), merge_mode_(std::move(merge_mode)) {
  auto* f = dynamic_cast<const RecurrentLayer*>(layer.get());
  if (!f)
    throw InvalidArgument("Bidirectional '" + name + "': wraps a SimpleRNN, LSTM or GRU, got " +
                          (layer ? layer->class_name() : std::string("nothing")));
  if (merge_mode_ != "concat" && merge_mode_ != "sum" && merge_mode_ != "ave" && merge_mode_ != "mul")
    throw InvalidArgument("Bidirectional '" + name +
                          "': merge_mode must be \"concat\", \"sum\", \"ave\" or \"mul\", got \"" + merge_mode_ +
                          "\" (None, two outputs, is not supported)");
  if (f->built())
    throw InvalidArgument("Bidirectional '" + name + "': the wrapped layer '" + f->name +
                          "' is already built; wrap a new layer (Keras copies it through its config)");
  RecurrentSpec fs = f->spec();
  fs.name = "forward_" + without_prefix(f->name, "forward_");
  fs.zero_output_for_mask = fs.return_sequences;  // Keras' force_zero_output_for_mask
  forward_ = std::make_shared<RecurrentLayer>(fs);
  if (backward) {
    auto* bl = dynamic_cast<const RecurrentLayer*>(backward.get());
    if (!bl)
      throw InvalidArgument("Bidirectional '" + name + "': backward_layer must be a SimpleRNN, LSTM or GRU, got " +
                            backward->class_name());
    if (bl->spec().go_backwards == fs.go_backwards || bl->spec().return_sequences != fs.return_sequences ||
        bl->spec().return_state != fs.return_state)
      throw InvalidArgument("Bidirectional '" + name + "': backward_layer '" + bl->name +
                            "' must have the other go_backwards and the same return_sequences and return_state as '" +
                            f->name + "'");
    RecurrentSpec bs = bl->spec();
    bs.zero_output_for_mask = bs.return_sequences;
    backward_ = std::make_shared<RecurrentLayer>(bs);
  } else {
    RecurrentSpec bs = f->spec();
    bs.go_backwards = !bs.go_backwards;
    bs.name = "backward_" + without_prefix(f->name, "backward_");
    bs.zero_output_for_mask = bs.return_sequences;
    if (bs.dropout > 0.0f) bs.seed = next_seed();  // its own masks
    backward_ = std::make_shared<RecurrentLayer>(bs);
  }
}

std::vector<KerasGroup> BidirectionalLayer::keras_groups() const {
  return {{"vars", name},
          {"forward_layer/vars", forward_->name},
          {"forward_layer/cell/vars", forward_->cell_name()},
          {"backward_layer/vars", backward_->name},
          {"backward_layer/cell/vars", backward_->cell_name()}};
}

std::vector<Shape> BidirectionalLayer::build_outputs(const std::vector<Shape>& in) {
  std::vector<Shape> out{build(in)};
  if (forward_->spec().return_state) {
    out.insert(out.end(), static_cast<size_t>(forward_->state_count()), Shape{-1, forward_->spec().units});
    out.insert(out.end(), static_cast<size_t>(backward_->state_count()), Shape{-1, backward_->spec().units});
  }
  return out;
}

Shape BidirectionalLayer::build(const std::vector<Shape>& in) {
  const std::string owner = "Bidirectional '" + name + "'";
  const size_t fs = static_cast<size_t>(forward_->state_count()), bs = static_cast<size_t>(backward_->state_count());
  if (in.size() != 1 && in.size() != 1 + fs + bs)
    throw InvalidArgument(owner + ": takes a sequence and " + std::to_string(fs + bs) +
                          " initial states (initial_state: the forward layer's, then the backward's), got " +
                          std::to_string(in.size() - 1));
  if (in.size() > 1) {
    forward_->check_states(in, 1, fs, owner + " (forward)");
    backward_->check_states(in, 1 + fs, bs, owner + " (backward)");
  }
  Shape out = forward_->output_shape(in[0], owner);
  const Shape back = backward_->output_shape(in[0], owner);
  if (back != out && merge_mode_ != "concat")
    throw InvalidArgument(owner + ": the forward output " + out.to_string() + " and the backward " + back.to_string() +
                          " cannot be merged by " + merge_mode_);
  if (back.rank() != out.rank())
    throw InvalidArgument(owner + ": the forward output " + out.to_string() + " and the backward " + back.to_string() +
                          " have different ranks");
  if (!built_) {
    features_ = in[0][2];
    auto adder = [this](const std::string& prefix) {
      return [this, prefix](const std::string& what, Shape s, const std::string& init) -> Weight& {
        return add_weight(prefix + "/" + what, std::move(s), init);
      };
    };
    forward_->create_weights(adder(forward_->name), features_, "forward_layer/cell/vars");
    backward_->create_weights(adder(backward_->name), features_, "backward_layer/cell/vars");
  } else if (in[0][2] != features_) {
    throw InvalidArgument(owner + " was built for " + std::to_string(features_) + " features per step, called on " +
                          in[0].to_string());
  }
  if (merge_mode_ == "concat") out[-1] += back[-1];
  return out;
}

int BidirectionalLayer::call(CallContext& ctx, const std::vector<int>& in) const { return call_outputs(ctx, in)[0]; }

std::vector<int> BidirectionalLayer::call_outputs(CallContext& ctx, const std::vector<int>& in) const {
  // Keras' Bidirectional forces zero_output_for_mask = return_sequences on both layers (unroll aside, as in call).
  const int mask = computing_mask(ctx, in);
  const bool fz = forward_->spec().return_sequences && !forward_->spec().unroll;
  const bool bz = backward_->spec().return_sequences && !backward_->spec().unroll;
  // Keras splits initial_state in halves: the forward layer's states, then the backward's.
  const auto fs = in.size() > 1 ? in.begin() + 1 + forward_->state_count() : in.end();
  std::vector<int> forward_states, backward_states;
  const bool states = forward_->spec().return_state;  // asked for: the fused LSTM op gives the output alone
  const int y = forward_->run(ctx, in[0], weights_.data(), name + "/" + forward_->name, false, mask, fz,
                              std::vector<int>(in.begin() + 1, fs), states ? &forward_states : nullptr);
  const int y_rev = backward_->run(ctx, in[0], weights_.data() + forward_->weight_count(), name + "/" + backward_->name,
                                   true, mask, bz, std::vector<int>(fs, in.end()), states ? &backward_states : nullptr);
  graph::OpBuilder b{ctx.g, nullptr, name + "/merge"};
  std::vector<int> out(1);
  if (merge_mode_ == "concat") {
    out[0] = graph::ops::concat(b, {y, y_rev}, -1);
  } else if (merge_mode_ == "mul") {
    out[0] = b.add(graph::Op::Mul, {y, y_rev});
  } else {
    const int sum = b.add(graph::Op::Add, {y, y_rev});
    out[0] = merge_mode_ == "sum" ? sum : graph::ops::mul_scalar(b, sum, 0.5f);  // ave: (y + y_rev) / 2, exactly
  }
  if (forward_->spec().return_state) {  // Keras: (output,) + forward states + backward states
    out.insert(out.end(), forward_states.begin(), forward_states.end());
    out.insert(out.end(), backward_states.begin(), backward_states.end());
  }
  return out;
}

int BidirectionalLayer::compute_mask(CallContext& ctx, const std::vector<int>&, int) const {
  return forward_->spec().return_sequences ? ctx.input_mask(0) : -1;
}

}  // namespace tk::nn

namespace tk::layers {
LayerPtr Bidirectional(LayerPtr layer, BidirectionalOptions o) {
  auto l = std::make_shared<nn::BidirectionalLayer>(layer, o.backward_layer, o.merge_mode, o.name);
  if (layer && layer->has_own_dtype_policy()) l->set_dtype_policy(layer->dtype_policy());
  return l;
}
}  // namespace tk::layers
