// Keras 3 configs of the recurrent layers (nn/layers/recurrent.h): SimpleRNN, LSTM, GRU and Bidirectional, whose
// config nests its forward and backward layers' objects ("layer", "backward_layer"), and of TimeDistributed
// (keras/src/layers/rnn/, nn/layers/time_distributed.h), whose config nests the wrapped layer's ("layer").
#include <optional>

#include "io/keras_opts.h"
#include "nn/layers/recurrent.h"
#include "nn/layers/time_distributed.h"

namespace tk::io::keras {

namespace {

nn::RecurrentSpec read_spec(nn::RecurrentSpec::Kind kind, Opts& o, const std::string& name) {
  nn::RecurrentSpec s;
  s.kind = kind;
  s.name = name;
  s.return_sequences = o.boolean("return_sequences", false);
  s.return_state = o.boolean("return_state", false);  // [output, states...]: several outputs
  s.go_backwards = o.boolean("go_backwards", false);
  s.stateful = o.boolean("stateful", false);
  s.unroll = o.boolean("unroll", false);  // trainkit always unrolls: the same math either way
  s.zero_output_for_mask = o.boolean("zero_output_for_mask", false);  // only acts on masked steps (no masks here)
  s.units = o.integer("units");
  s.activation = o.activation();
  if (kind != nn::RecurrentSpec::Kind::simple_rnn) s.recurrent_activation = o.activation("recurrent_activation");
  s.use_bias = o.boolean("use_bias", true);
  s.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
  s.recurrent_initializer = o.initializer("recurrent_initializer", "orthogonal");
  s.bias_initializer = o.initializer("bias_initializer", "zeros");
  if (kind == nn::RecurrentSpec::Kind::lstm) s.unit_forget_bias = o.boolean("unit_forget_bias", true);
  if (kind == nn::RecurrentSpec::Kind::gru) s.reset_after = o.boolean("reset_after", true);
  s.dropout = static_cast<float>(o.number("dropout", 0.0));
  s.recurrent_dropout = static_cast<float>(o.number("recurrent_dropout", 0.0));
  s.seed = static_cast<uint64_t>(o.integer("seed", 0));
  if (const json* impl = o.get("implementation"))  // Keras 2 files: 1 and 2 compute the same (without dropout)
    if (!impl->is_number_integer() || (impl->get<int64_t>() != 1 && impl->get<int64_t>() != 2))
      o.bad("implementation", "must be 1 or 2, got " + impl->dump());
  return s;
}

// The layer a wrapper (`wrapper` '`name`') holds, from its object. Its regularizers and constraints would be the
// wrapper's to apply; trainkit does not (yet): one clear error.
LayerPtr wrapped_layer(Opts& o, const json& obj, const std::string& wrapper, const std::string& name) {
  LayerPtr inner = layer_from_json(obj, o.label() + ": " + wrapper + " '" + name + "'");
  if (!inner->regularizers.empty() || inner->activity_regularizer)
    throw Unsupported(o.where() + ": the wrapped layer '" + inner->name +
                      "' has a regularizer, which trainkit does not apply inside a wrapper (regularize a layer "
                      "outside it, or remove the regularizer)");
  if (!inner->constraints.empty())
    throw Unsupported(o.where() + ": the wrapped layer '" + inner->name +
                      "' has a weight constraint, which trainkit does not apply inside a wrapper (constrain a layer "
                      "outside it, or remove the constraint)");
  return inner;
}

}  // namespace

LayerPtr rnn_layer_from_json(const std::string& cls, Opts& o, const std::string& name, const json& config) {
  using Kind = nn::RecurrentSpec::Kind;
  if (cls == "SimpleRNN" || cls == "LSTM" || cls == "GRU") {
    const Kind kind = cls == "SimpleRNN" ? Kind::simple_rnn : cls == "LSTM" ? Kind::lstm : Kind::gru;
    return std::make_shared<nn::RecurrentLayer>(read_spec(kind, o, name));
  }
  if (cls == "TimeDistributed") {
    const json* layer = o.get("layer");
    if (!layer) o.bad("layer", "is missing (the wrapped layer's object)");
    return std::make_shared<nn::TimeDistributedLayer>(wrapped_layer(o, *layer, "TimeDistributed", name), name);
  }
  if (cls != "Bidirectional") return {};
  auto it = config.find("merge_mode");
  if (it != config.end() && it->is_null())
    o.unsupported("merge_mode", "None gives two outputs; trainkit merges by concat, sum, ave or mul");
  const std::string merge_mode = o.str("merge_mode", "concat");
  const json* layer = o.get("layer");
  if (!layer) o.bad("layer", "is missing (the wrapped recurrent layer's object)");
  LayerPtr forward = wrapped_layer(o, *layer, "Bidirectional", name);
  LayerPtr backward;
  if (const json* b = o.get("backward_layer")) backward = wrapped_layer(o, *b, "Bidirectional", name);
  return std::make_shared<nn::BidirectionalLayer>(forward, backward, merge_mode, name);
}

std::optional<json> rnn_layer_to_json(const Layer& layer, const std::string& policy) {
  if (auto* td = dynamic_cast<const nn::TimeDistributedLayer*>(&layer)) {
    json inner = layer_to_json(*td->layer(), policy);
    inner["config"]["trainable"] = layer.trainable;
    const json config = {
        {"name", layer.name}, {"trainable", layer.trainable}, {"dtype", dtype_policy_json(policy)}, {"layer", inner}};
    return keras_object_json("keras.layers", "TimeDistributed", config);
  }
  auto* bi = dynamic_cast<const nn::BidirectionalLayer*>(&layer);
  if (!bi) return std::nullopt;  // SimpleRNN, LSTM and GRU: their get_config() is flat
  json forward = layer_to_json(bi->forward_layer(), policy);
  json backward = layer_to_json(bi->backward_layer(), policy);
  forward["config"]["trainable"] = backward["config"]["trainable"] = layer.trainable;
  const json config = {{"name", layer.name},
                       {"trainable", layer.trainable},
                       {"dtype", dtype_policy_json(policy)},
                       {"merge_mode", bi->merge_mode()},
                       {"layer", forward},
                       {"backward_layer", backward}};
  return keras_object_json("keras.layers", "Bidirectional", config);
}

}  // namespace tk::io::keras
