// Keras 3 configs of the attention layers -> trainkit layers (the dispatch in keras_layers.cpp's make_layer asks here
// for classes it does not know). Every key is read or checked to be Keras' default (Opts::finish).
#include "io/keras_opts.h"

namespace tk::io::keras {

LayerPtr attention_layer_from_json(const std::string& cls, Opts& o, const std::string& name) {
  if (cls == "MultiHeadAttention") {
    layers::MultiHeadAttentionOptions m;
    const int64_t heads = o.integer("num_heads");
    const int64_t key_dim = o.integer("key_dim");
    m.value_dim = o.integer("value_dim", 0);  // null: key_dim
    m.dropout = static_cast<float>(o.number("dropout", 0.0));
    m.use_bias = o.boolean("use_bias", true);
    if (auto s = o.int_list("output_shape")) m.output_shape = std::move(*s);  // an int or a list (Keras: a tuple)
    // Attention over the steps of (batch, steps, features): Keras writes the axis it chose at build, (1,).
    if (const json* a = o.get("attention_axes")) {
      const bool steps = (a->is_number_integer() && a->get<int64_t>() == 1) ||
                         (a->is_array() && a->size() == 1 && (*a)[0].is_number_integer() && (*a)[0] == 1);
      if (!steps) o.unsupported("attention_axes", "attention over the steps axis 1 of (batch, steps, features)");
    }
    o.must_be_default("use_gate", false);
    o.must_be_default("sliding_window", nullptr);
    o.must_be_default("flash_attention", nullptr);
    m.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
    m.bias_initializer = o.initializer("bias_initializer", "zeros");
    m.seed = static_cast<uint64_t>(o.integer("seed", 0));
    m.name = name;
    return layers::MultiHeadAttention(heads, key_dim, m);
  }
  if (cls == "Attention" || cls == "AdditiveAttention") {
    const bool additive = cls == "AdditiveAttention";
    const bool use_scale = o.boolean("use_scale", additive);
    const float dropout = static_cast<float>(o.number("dropout", 0.0));
    const uint64_t seed = static_cast<uint64_t>(o.integer("seed", 0));
    if (additive) return layers::AdditiveAttention({use_scale, dropout, seed, name});
    const std::string score_mode = o.str("score_mode", "dot");
    return layers::Attention({use_scale, score_mode, dropout, seed, name});
  }
  return {};
}

}  // namespace tk::io::keras
