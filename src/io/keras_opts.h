// Reading one Keras layer config (keras_layers.cpp and the layer families' readers beside it, e.g.
// keras_layers_rnn.cpp, keras_layers_attention.cpp): Opts hands out each key once, checks its type, and finish()
// refuses any key left unread that is not at Keras' default.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/keras_internal.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk::io::keras {

// Keras initializer class names <-> trainkit's string names.
inline const std::map<std::string, std::string>& initializer_classes() {
  static const std::map<std::string, std::string> m = {{"GlorotUniform", "glorot_uniform"},
                                                       {"GlorotNormal", "glorot_normal"},
                                                       {"HeNormal", "he_normal"},
                                                       {"HeUniform", "he_uniform"},
                                                       {"LecunNormal", "lecun_normal"},
                                                       {"LecunUniform", "lecun_uniform"},
                                                       {"Zeros", "zeros"},
                                                       {"Ones", "ones"},
                                                       {"RandomNormal", "random_normal"},
                                                       {"RandomUniform", "random_uniform"},
                                                       {"Orthogonal", "orthogonal"}};
  return m;
}

// One layer's config being read: every key must be consumed or be one Keras writes with its default.
class Opts {
 public:
  Opts(const json& config, std::string cls, std::string name, std::string label)
      : c_(config), cls_(std::move(cls)), name_(std::move(name)), label_(std::move(label)) {}

  std::string where() const { return label_ + ": layer '" + name_ + "' (" + cls_ + ")"; }
  const std::string& label() const { return label_; }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw FormatError(where() + ": option '" + key + "' " + what + " (the config is damaged or not from Keras 3)");
  }
  [[noreturn]] void unsupported(const std::string& key, const std::string& what) const {
    throw Unsupported(where() + ": option '" + key + "' = " + c_.at(key).dump() + " is not supported by trainkit (" +
                      what + ")");
  }
  // A Keras object option ({"class_name": ..., "config": {...}}) or its short name ("l2", "max_norm"): the class and
  // the config ({} for a name). FormatError naming the option for anything else; `what` says what it must be.
  std::pair<std::string, json> keras_object(const json& v, const std::string& key, const std::string& what) const {
    if (v.is_string()) return {v.get<std::string>(), json::object()};
    if (!v.is_object() || !v.contains("class_name") || !v["class_name"].is_string())
      bad(key, "must be " + what + ", got " + v.dump());
    const bool has_config = v.contains("config") && v["config"].is_object();
    return {v["class_name"].get<std::string>(), has_config ? v["config"] : json::object()};
  }
  const json* get(const std::string& key) {
    used_.insert(key);
    auto it = c_.find(key);
    return it == c_.end() || it->is_null() ? nullptr : &*it;
  }
  // get(key), FormatError when it is missing (or null) unless `optional`.
  const json* need(const std::string& key, bool optional = false) {
    const json* v = get(key);
    if (!v && !optional) bad(key, "is missing");
    return v;
  }
  int64_t integer(const std::string& key, std::optional<int64_t> def = std::nullopt) {
    const json* v = need(key, def.has_value());
    if (!v) return *def;
    if (!v->is_number_integer()) bad(key, "must be an integer, got " + v->dump());
    return v->get<int64_t>();
  }
  double number(const std::string& key, std::optional<double> def = std::nullopt) {
    const json* v = need(key, def.has_value());
    if (!v) return *def;
    if (!v->is_number()) bad(key, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(key, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::string str(const std::string& key, const std::string& def) {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) bad(key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  std::vector<int64_t> ints(const std::string& key) {
    const json* v = get(key);
    if (!v || !v->is_array()) bad(key, "must be a list of integers");
    std::vector<int64_t> out;
    for (const json& e : *v) {
      if (!e.is_number_integer()) bad(key, "must be a list of integers, got " + v->dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  // An int or a list of ints, as {int} or the list (LayerNormalization's axis); nullopt when missing.
  std::optional<std::vector<int64_t>> int_list(const std::string& key) {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) return std::vector<int64_t>{v->get<int64_t>()};
    return ints(key);
  }
  // A number or a (lower, upper) pair of numbers (the random layers' factors); null when absent and `optional`.
  const json* number_or_pair(const std::string& key, bool optional = false) {
    const json* v = need(key, optional);
    if (v && !v->is_number() && (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()))
      bad(key, "must be a number or a (lower, upper) pair, got " + v->dump());
    return v;
  }
  // The number `k` in `c`, the config of the Keras object in option `key` (a regularizer's l2); def when absent/null.
  float object_number(const json& c, const std::string& key, const char* k, float def) const {
    if (!c.contains(k) || c[k].is_null()) return def;
    if (!c[k].is_number()) bad(key, std::string("'s ") + k + " must be a number, got " + c[k].dump());
    return c[k].get<float>();
  }
  // Reads every option named <prefix><suffix> (kernel_regularizer, bias_constraint): f(key, prefix, value) for each
  // that is not null (Keras' default).
  template <class F>
  void each_suffixed(const std::string& suffix, F&& f) {
    for (const auto& [key, value] : c_.items()) {
      if (key.size() <= suffix.size() || !key.ends_with(suffix)) continue;
      used_.insert(key);
      if (!value.is_null()) f(key, key.substr(0, key.size() - suffix.size()), value);
    }
  }
  // An int or an (h, w) pair, as Keras' kernel_size.
  layers::Size2 pair(const std::string& key, std::optional<layers::Size2> def = std::nullopt) {
    const json* v = need(key, def.has_value());
    if (!v) return *def;
    if (v->is_number_integer()) return layers::Size2(v->get<int64_t>());
    std::vector<int64_t> p = ints(key);
    if (p.size() != 2) bad(key, "must be an integer or a pair, got " + v->dump());
    return layers::Size2(p[0], p[1]);
  }
  // An int or a one-element list, as Keras' 1D kernel_size / strides / pool_size.
  int64_t single(const std::string& key, std::optional<int64_t> def = std::nullopt) {
    const json* v = need(key, def.has_value());
    if (!v) return *def;
    if (v->is_number_integer()) return v->get<int64_t>();
    std::vector<int64_t> p = ints(key);
    if (p.size() != 1) bad(key, "must be an integer or a one-element list, got " + v->dump());
    return p[0];
  }
  // An int (both ends) or a (before, after) pair, as Keras' ZeroPadding1D padding / Cropping1D cropping.
  std::pair<int64_t, int64_t> ends(const std::string& key, int64_t def) {
    const json* v = get(key);
    if (!v) return {def, def};
    if (v->is_number_integer()) return {v->get<int64_t>(), v->get<int64_t>()};
    std::vector<int64_t> p = ints(key);
    if (p.size() != 2) bad(key, "must be an integer or a (before, after) pair, got " + v->dump());
    return {p[0], p[1]};
  }
  // Keras' 2D padding / cropping spec: an int, (h, w), or ((top, bottom), (left, right)) -> {top, bottom, left, right}.
  std::array<int64_t, 4> sides(const std::string& key, int64_t def) {
    const json* p = get(key);
    if (!p) return {def, def, def, def};
    if (p->is_number_integer()) {
      const int64_t v = p->get<int64_t>();
      return {v, v, v, v};
    }
    auto fail = [&] { bad(key, "must be an int, (h, w) or ((top, bottom), (left, right)), got " + p->dump()); };
    if (!p->is_array() || p->size() != 2) fail();
    if ((*p)[0].is_number_integer() && (*p)[1].is_number_integer()) {
      const int64_t h = (*p)[0].get<int64_t>(), w = (*p)[1].get<int64_t>();
      return {h, h, w, w};
    }
    std::array<int64_t, 4> v{};
    for (int i = 0; i < 2; ++i) {
      const json& pair = (*p)[static_cast<size_t>(i)];
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer()) fail();
      v[2 * i] = pair[0].get<int64_t>(), v[2 * i + 1] = pair[1].get<int64_t>();
    }
    return v;
  }
  std::string activation(const std::string& key = "activation") {
    const json* v = get(key);
    if (!v) return "linear";
    if (!v->is_string()) unsupported(key, "activations are Keras' names (relu, gelu, silu, ...), not objects");
    return v->get<std::string>();
  }
  // An initializer object or name; its own config (seed, ...) only affects fresh weights and is not kept.
  std::string initializer(const std::string& key, const std::string& def) {
    const json* v = get(key);
    if (!v) return def;
    if (v->is_string()) return v->get<std::string>();
    if (!v->is_object() || !v->contains("class_name") || !(*v)["class_name"].is_string())
      bad(key, "must be an initializer object, got " + v->dump());
    const std::string cls = (*v)["class_name"].get<std::string>();
    if (cls == "VarianceScaling") {  // keras.applications' EfficientNet: scale 2, fan_out, truncated_normal
      const json c = v->contains("config") ? (*v)["config"] : json::object();
      const json scale = c.value("scale", json(1.0));
      const std::string mode = c.value("mode", std::string("fan_in"));
      const std::string dist = c.value("distribution", std::string("truncated_normal"));
      if (!scale.is_number()) bad(key, "VarianceScaling's scale must be a number, got " + scale.dump());
      std::ostringstream name;
      name.precision(17);
      name << "variance_scaling:" << scale.get<double>() << ":" << mode << ":"
           << (dist == "normal" ? "truncated_normal" : dist);  // Keras 2 spelled the truncated one "normal"
      try {
        nn::check_initializer(name.str());
      } catch (const InvalidArgument& e) {
        bad(key, e.what());
      }
      return name.str();
    }
    if (cls == "Orthogonal" && v->contains("config") && (*v)["config"].contains("gain") &&
        (*v)["config"]["gain"] != json(1.0) && (*v)["config"]["gain"] != json(1))
      unsupported(key, "Orthogonal with gain 1 only");
    auto it = initializer_classes().find(cls);
    if (it == initializer_classes().end())
      unsupported(key,
                  "initializers: GlorotUniform, GlorotNormal, HeNormal, HeUniform, LecunNormal, LecunUniform, "
                  "Zeros, Ones, RandomNormal, RandomUniform, Orthogonal, VarianceScaling");
    return it->second;
  }
  void channels_last() {
    const std::string f = str("data_format", "channels_last");
    if (f != "channels_last") unsupported("data_format", "trainkit's image layers are channels_last");
  }
  // Keys Keras writes with a default trainkit matches: absent, null, false, or the given value.
  void must_be_default(const std::string& key, const json& def = nullptr) {
    used_.insert(key);
    auto it = c_.find(key);
    if (it == c_.end() || it->is_null() || *it == def || (it->is_boolean() && !it->get<bool>())) return;
    unsupported(key, "trainkit implements only Keras' default " + def.dump());
  }
  // Every key not read is an option trainkit does not know.
  void finish() {
    static const std::set<std::string> kNullDefaults = {
        "kernel_regularizer", "bias_regularizer", "activity_regularizer",
        "kernel_constraint",  "bias_constraint",  "quantization_config",
        "lora_rank",          "lora_alpha",       "beta_regularizer",
        "gamma_regularizer",  "beta_constraint",  "gamma_constraint",
        "noise_shape",        "renorm",           "renorm_clipping",
        "input_axes",         "output_axes",      "autocast",
        "input_shape",        "batch_input_shape"};
    for (const auto& [key, value] : c_.items()) {
      if (used_.count(key)) continue;
      if (kNullDefaults.count(key)) {
        must_be_default(key, nullptr);
        continue;
      }
      throw Unsupported(where() + ": option '" + key + "' = " + value.dump() + " is not one trainkit knows for " +
                        cls_ + " (remove it, or use a layer trainkit supports)");
    }
  }

 private:
  const json& c_;
  std::string cls_, name_, label_;
  std::set<std::string> used_ = {"name", "trainable", "dtype"};
};

// Recurrent layers (keras_layers_rnn.cpp): SimpleRNN, LSTM, GRU, Bidirectional from their configs (null for
// another class), and Bidirectional's config with its nested layers (null for another layer).
LayerPtr rnn_layer_from_json(const std::string& cls, Opts& o, const std::string& name, const json& config);
std::optional<json> rnn_layer_to_json(const Layer& layer, const std::string& policy);
json initializer_object(const std::string& name);
// The attention layers' readers (keras_layers_attention.cpp): the layer for `cls`, or null when `cls` is not one of
// theirs.
LayerPtr attention_layer_from_json(const std::string& cls, Opts& o, const std::string& name);
// Weight constraints (keras_constraints.cpp): every non-null <key>_constraint of a layer's config onto
// Layer::constraints, and back as Keras' objects.
void read_constraints(Opts& o, Layer& layer);
void write_constraints(json& config, const Layer& layer);

}  // namespace tk::io::keras
