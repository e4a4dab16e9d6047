// Layers <-> Keras 3 layer objects ({"module": "keras.layers", "class_name", "config", "registered_name"}).
// Loading accepts exactly what trainkit implements: every key of a layer's config is either read, or must
// hold Keras' default (null regularizers, channels_last, ...); anything else is one error naming the layer.
#include <array>
#include <map>
#include <set>
#include <sstream>

#include "io/keras_internal.h"
#include "io/keras_opts.h"
#include "nn/layers/context.h"
#include "nn/layers/input_layer.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/mixed_precision.h"

namespace tk::io::keras {

namespace {

const char* const kSupported =
    "InputLayer, Dense, Activation, Dropout, SpatialDropout2D, Flatten, Reshape, Add, Concatenate, Rescaling, "
    "Conv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D, BatchNormalization, "
    "ZeroPadding2D, UpSampling2D, LayerNormalization, "
    "Embedding, Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, GlobalMaxPooling1D, ZeroPadding1D, "
    "Cropping1D, UpSampling1D, SpatialDropout1D, "
    "SimpleRNN, LSTM, GRU, Bidirectional, TimeDistributed, "
    "ReLU, LeakyReLU, PReLU, ELU, Softmax, Subtract, Multiply, Average, Maximum, Minimum, Permute, RepeatVector, "
    "Identity, Cropping2D, Normalization, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose, MultiHeadAttention, "
    "Attention, AdditiveAttention, ActivityRegularization, GaussianNoise, GaussianDropout, RandomFlip, RandomContrast, "
    "Dot, CenterCrop, Resizing, RandomTranslation, RandomRotation, RandomZoom";

// Keras' regularizer object {"class_name": "L2", "config": {"l2": 0.01}, ...} (or its name, "l2") -> Regularizer.
Regularizer regularizer_from_json(const json& v, Opts& o, const std::string& key) {
  const auto [cls, c] = o.keras_object(v, key, "a regularizer object");
  auto factor = [&](const char* k, float def) { return o.object_number(c, key, k, def); };
  try {
    if (cls == "L1" || cls == "l1") return regularizers::L1(factor("l1", 0.01f));
    if (cls == "L2" || cls == "l2") return regularizers::L2(factor("l2", 0.01f));
    if (cls == "L1L2" || cls == "l1_l2") return regularizers::L1L2(factor("l1", 0.0f), factor("l2", 0.0f));
  } catch (const InvalidArgument& e) {
    o.bad(key, e.what());
  }
  o.unsupported(key, "regularizers: L1, L2, L1L2");
}

json regularizer_json(const Regularizer& r) {
  json c = json::object();
  if (r.kind != Regularizer::Kind::l2) c["l1"] = float_json(r.l1);
  if (r.kind != Regularizer::Kind::l1) c["l2"] = float_json(r.l2);
  return keras_object_json("keras.regularizers", r.class_name(), c);
}

// Every non-null <key>_regularizer of a layer's config onto the layer. Wrappers' inner layers and
// MultiHeadAttention's activity regularizer (which Keras hands to each of its dense sub-layers) are refused by name.
void read_regularizers(Opts& o, const std::string& cls, Layer& layer) {
  o.each_suffixed("_regularizer", [&](const std::string& key, const std::string& prefix, const json& value) {
    if (prefix == "activity" && cls == "MultiHeadAttention")
      o.unsupported(key, "MultiHeadAttention's activity_regularizer, which Keras applies inside each projection");
    const Regularizer r = regularizer_from_json(value, o, key);
    if (prefix == "activity")
      layer.activity_regularizer = r;
    else
      layer.regularizers[prefix] = r;
  });
}

}  // namespace

json keras_object_json(const std::string& module, const std::string& class_name, const json& config) {
  return {{"module", module}, {"class_name", class_name}, {"config", config}, {"registered_name", nullptr}};
}

json dtype_policy_json(const std::string& policy) {
  return keras_object_json("keras", "DTypePolicy", {{"name", policy}});
}

json initializer_object(const std::string& name) {
  if (name.rfind("variance_scaling:", 0) == 0) {  // variance_scaling:SCALE:MODE:DISTRIBUTION (nn/layers/initializers)
    const size_t a = name.find(':'), b = name.find(':', a + 1), c = name.find(':', b + 1);
    const json config = {{"scale", std::stod(name.substr(a + 1, b - a - 1))},
                         {"mode", name.substr(b + 1, c - b - 1)},
                         {"distribution", name.substr(c + 1)},
                         {"seed", nullptr}};
    return keras_object_json("keras.initializers", "VarianceScaling", config);
  }
  for (const auto& [cls, n] : initializer_classes())
    if (n == name) {
      json config = json::object();
      if (cls != "Zeros" && cls != "Ones") config["seed"] = nullptr;
      if (cls == "Orthogonal") config["gain"] = 1.0;
      return keras_object_json("keras.initializers", cls, config);
    }
  return name;  // unreachable for a constructed layer (its initializer was validated)
}

namespace {

// A dtype option's name: a string, or a DTypePolicy object's config.name; nullopt for anything else.
std::optional<std::string> policy_name(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("config") && v["config"].is_object() && v["config"].contains("name") &&
      v["config"]["name"].is_string())
    return v["config"]["name"].get<std::string>();
  return std::nullopt;
}

// The layer's policy in the file; empty when the file gives none.
std::string check_dtype(const json& config, const std::string& where) {
  auto it = config.find("dtype");
  if (it == config.end() || it->is_null()) return {};
  const std::optional<std::string> policy = policy_name(*it);
  if (!policy) throw FormatError(where + ": 'dtype' must be a policy name or a DTypePolicy object, got " + it->dump());
  try {
    mixed_precision::check_policy(*policy);
  } catch (const Error& e) {
    throw Unsupported(where + ": dtype policy '" + *policy + "' is not supported (" + e.what() + ")");
  }
  return *policy;
}

// An InputLayer's tensor dtype: a name ("int32") or a DTypePolicy object, as Keras writes either.
DType input_dtype(Opts& o) {
  const json* d = o.get("dtype");
  if (!d) return DType::f32;
  const std::optional<std::string> n = policy_name(*d);
  if (!n) o.bad("dtype", "must be a dtype name or a DTypePolicy object, got " + d->dump());
  if (*n == "float32") return DType::f32;
  if (*n == "int32") return DType::i32;
  if (*n == "int64") return DType::i64;
  o.unsupported("dtype", "an Input is float32, or int32 / int64 for token ids");
}

// The options the 2D convolutions share (Conv2D, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose) into c; the
// activation.
template <class C>
std::string read_conv2d(Opts& o, C& c, const std::string& name) {
  c.strides = o.pair("strides", layers::Size2(1));
  c.padding = o.str("padding", "valid");
  o.channels_last();
  c.dilation_rate = o.pair("dilation_rate", layers::Size2(1));
  c.use_bias = o.boolean("use_bias", true);
  c.bias_initializer = o.initializer("bias_initializer", "zeros");
  c.name = name;
  return o.activation();
}

LayerPtr make_layer(const std::string& cls, Opts& o, const std::string& name, const json& config) {
  using namespace layers;
  if (LayerPtr rnn = rnn_layer_from_json(cls, o, name, config)) return rnn;  // keras_layers_rnn.cpp
  if (cls == "InputLayer") {
    std::vector<int64_t> shape;
    if (config.contains("batch_shape")) {
      o.get("batch_input_shape");
      const json& bs = config["batch_shape"];
      o.get("batch_shape");
      if (!bs.is_array() || bs.empty()) o.bad("batch_shape", "must be a list starting with the batch dimension");
      for (size_t i = 1; i < bs.size(); ++i) {
        if (!bs[i].is_number_integer())
          o.bad("batch_shape", "must hold known dimensions after the batch, got " + bs.dump());
        shape.push_back(bs[i].get<int64_t>());
      }
    } else {
      const json* bs = o.get("batch_input_shape");
      if (!bs || !bs->is_array() || bs->empty()) o.bad("batch_shape", "is missing");
      for (size_t i = 1; i < bs->size(); ++i) {
        if (!(*bs)[i].is_number_integer()) o.bad("batch_input_shape", "must hold known dimensions, got " + bs->dump());
        shape.push_back((*bs)[i].get<int64_t>());
      }
    }
    o.must_be_default("sparse");
    o.must_be_default("ragged");
    o.must_be_default("optional");
    return layers::Input(Shape(shape), name, input_dtype(o));
  }
  if (cls == "Dense") {
    const int64_t units = o.integer("units");
    const std::string act = o.activation();
    DenseOptions d;
    d.use_bias = o.boolean("use_bias", true);
    d.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
    d.bias_initializer = o.initializer("bias_initializer", "zeros");
    d.name = name;
    return Dense(units, act, d);
  }
  if (cls == "Activation") return Activation(o.activation(), name);
  if (cls == "Dropout" || cls == "SpatialDropout2D") {
    const float rate = static_cast<float>(o.number("rate"));
    const int64_t seed = o.integer("seed", 0);
    if (cls == "SpatialDropout2D") o.channels_last();
    if (cls == "SpatialDropout2D") return SpatialDropout2D(rate, static_cast<uint64_t>(seed), name);
    const json* ns = o.get("noise_shape");  // EfficientNet's stochastic depth: [null, 1, 1, 1]
    if (!ns) return Dropout(rate, static_cast<uint64_t>(seed), name);
    if (!ns->is_array() || ns->empty()) o.bad("noise_shape", "must be null or a list of integers / nulls");
    std::vector<int64_t> noise;
    for (const json& d : *ns) {
      if (!d.is_null() && !d.is_number_integer())
        o.bad("noise_shape", "must be null or a list of integers / nulls, got " + ns->dump());
      noise.push_back(d.is_null() ? -1 : d.get<int64_t>());
    }
    return Dropout(rate, std::move(noise), static_cast<uint64_t>(seed), name);
  }
  if (cls == "Flatten") {
    o.channels_last();
    return Flatten(name);
  }
  if (cls == "Reshape") return Reshape(Shape(o.ints("target_shape")), name);
  if (cls == "Add") return Add(name);
  if (cls == "Concatenate") return Concatenate(static_cast<int>(o.integer("axis", -1)), name);
  if (cls == "Rescaling") {
    const json* s = o.get("scale");
    if (!s || !s->is_number()) o.bad("scale", "must be a number (per-channel scales are not supported)");
    const json* off = o.get("offset");
    if (off && !off->is_number()) o.bad("offset", "must be a number (per-channel offsets are not supported)");
    return Rescaling(s->get<float>(), off ? off->get<float>() : 0.0f, name);
  }
  if (cls == "Conv2D") {
    const int64_t filters = o.integer("filters");
    const Size2 k = o.pair("kernel_size");
    Conv2DOptions c;
    const std::string act = read_conv2d(o, c, name);
    c.groups = o.integer("groups", 1);
    c.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
    return Conv2D(filters, k, act, c);
  }
  if (cls == "MaxPooling2D" || cls == "AveragePooling2D") {
    const Size2 pool = o.pair("pool_size", Size2(2));
    PoolOptions p;
    if (o.get("strides")) p.strides = o.pair("strides");
    p.padding = o.str("padding", "valid");
    o.channels_last();
    p.name = name;
    return cls == "MaxPooling2D" ? MaxPooling2D(pool, p) : AveragePooling2D(pool, p);
  }
  if (cls == "GlobalAveragePooling2D" || cls == "GlobalMaxPooling2D") {
    o.channels_last();
    if (o.boolean("keepdims", false)) o.unsupported("keepdims", "global pooling returns (batch, channels)");
    return cls == "GlobalAveragePooling2D" ? GlobalAveragePooling2D(name) : GlobalMaxPooling2D(name);
  }
  if (cls == "BatchNormalization") {
    BatchNormalizationOptions b;
    // Kept as the file has it (keras.applications writes axis=3 for NHWC); the layer checks it is the last axis
    // when it is built, where the input's rank is known.
    b.axis = static_cast<int>(o.integer("axis", -1));
    b.momentum = static_cast<float>(o.number("momentum", 0.99));
    b.epsilon = static_cast<float>(o.number("epsilon", 1e-3));
    b.synchronized = o.boolean("synchronized", false);  // Keras 3: statistics over the replicas under a strategy
    if (!o.boolean("center", true)) o.unsupported("center", "trainkit's BatchNormalization always has beta");
    if (!o.boolean("scale", true)) o.unsupported("scale", "trainkit's BatchNormalization always has gamma");
    o.get("renorm_momentum");  // read only with renorm, which must be off (finish() checks)
    o.initializer("beta_initializer", "zeros");
    o.initializer("gamma_initializer", "ones");
    o.initializer("moving_mean_initializer", "zeros");
    o.initializer("moving_variance_initializer", "ones");
    b.name = name;
    return BatchNormalization(b);
  }
  if (cls == "LayerNormalization") {
    LayerNormalizationOptions l;
    if (const auto axis = o.int_list("axis")) l.axis.assign(axis->begin(), axis->end());
    l.epsilon = static_cast<float>(o.number("epsilon", 1e-3));
    l.center = o.boolean("center", true);
    l.scale = o.boolean("scale", true);
    l.rms_scaling = o.boolean("rms_scaling", false);
    l.beta_initializer = o.initializer("beta_initializer", "zeros");
    l.gamma_initializer = o.initializer("gamma_initializer", "ones");
    l.name = name;
    return LayerNormalization(l);
  }
  if (cls == "ZeroPadding2D") {
    o.channels_last();
    const auto [top, bottom, left, right] = o.sides("padding", 1);
    return ZeroPadding2D(top, bottom, left, right, name);
  }
  if (cls == "UpSampling2D") {
    const Size2 size = o.pair("size", Size2(2));
    o.channels_last();
    return UpSampling2D(size, name, o.str("interpolation", "nearest"));
  }
  // ---- sequence layers (issue 32): Embedding and the 1D layers, (batch, steps, channels)
  if (cls == "Embedding") {
    const int64_t input_dim = o.integer("input_dim");
    const int64_t output_dim = o.integer("output_dim");
    EmbeddingOptions e;
    e.embeddings_initializer = o.initializer("embeddings_initializer", "uniform");
    e.mask_zero = o.boolean("mask_zero", false);
    e.name = name;
    return Embedding(input_dim, output_dim, e);
  }
  if (cls == "Masking") return Masking(static_cast<float>(o.number("mask_value", 0.0)), name);
  if (cls == "Conv1D") {
    const int64_t filters = o.integer("filters");
    const int64_t k = o.single("kernel_size");
    Conv1DOptions c;
    c.strides = o.single("strides", 1);
    c.padding = o.str("padding", "valid");
    o.channels_last();
    c.dilation_rate = o.single("dilation_rate", 1);
    c.groups = o.integer("groups", 1);
    const std::string act = o.activation();
    c.use_bias = o.boolean("use_bias", true);
    c.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
    c.bias_initializer = o.initializer("bias_initializer", "zeros");
    c.name = name;
    return Conv1D(filters, k, act, c);
  }
  if (cls == "MaxPooling1D" || cls == "AveragePooling1D") {
    const int64_t pool = o.single("pool_size", 2);
    Pool1DOptions p;
    if (o.get("strides")) p.strides = o.single("strides");
    p.padding = o.str("padding", "valid");
    o.channels_last();
    p.name = name;
    return cls == "MaxPooling1D" ? MaxPooling1D(pool, p) : AveragePooling1D(pool, p);
  }
  if (cls == "GlobalAveragePooling1D" || cls == "GlobalMaxPooling1D") {
    o.channels_last();
    const bool keepdims = o.boolean("keepdims", false);
    return cls == "GlobalAveragePooling1D" ? GlobalAveragePooling1D(keepdims, name)
                                           : GlobalMaxPooling1D(keepdims, name);
  }
  if (cls == "ZeroPadding1D") {
    o.channels_last();
    const auto [before, after] = o.ends("padding", 1);
    return ZeroPadding1D(before, after, name);
  }
  if (cls == "Cropping1D") {
    const auto [begin, end] = o.ends("cropping", 1);
    return Cropping1D(begin, end, name);
  }
  if (cls == "UpSampling1D") return UpSampling1D(o.integer("size", 2), name);
  if (cls == "SpatialDropout1D") {
    const float rate = static_cast<float>(o.number("rate"));
    return SpatialDropout1D(rate, static_cast<uint64_t>(o.integer("seed", 0)), name);
  }
  // ---- activation layers, elementwise merges and reshaping layers composed of the general ops
  if (cls == "ReLU") {
    ReLUOptions r;
    if (const json* m = o.get("max_value")) {
      if (!m->is_number()) o.bad("max_value", "must be a number or null, got " + m->dump());
      r.max_value = m->get<float>();
    }
    r.negative_slope = static_cast<float>(o.number("negative_slope", 0.0));
    r.threshold = static_cast<float>(o.number("threshold", 0.0));
    r.name = name;
    return ReLU(r);
  }
  if (cls == "LeakyReLU") {
    // Keras 3 writes negative_slope; Keras 2 files (and Keras 3's deprecated argument) say alpha.
    const double alpha = o.number("alpha", 0.3);
    return LeakyReLU(static_cast<float>(o.number("negative_slope", alpha)), name);
  }
  if (cls == "PReLU") {
    PReLUOptions p;
    p.alpha_initializer = o.initializer("alpha_initializer", "zeros");
    if (auto a = o.int_list("shared_axes")) p.shared_axes = std::move(*a);
    p.name = name;
    return PReLU(p);
  }
  if (cls == "ELU") return ELU(static_cast<float>(o.number("alpha", 1.0)), name);
  if (cls == "Softmax") {
    const json* a = o.get("axis");
    if (!a) return Softmax(-1, name);
    if (a->is_number_integer()) return Softmax(static_cast<int>(a->get<int64_t>()), name);
    std::vector<int> axes;
    for (int64_t v : o.ints("axis")) axes.push_back(static_cast<int>(v));
    return Softmax(axes, name);
  }
  if (cls == "Subtract") return Subtract(name);
  if (cls == "Multiply") return Multiply(name);
  if (cls == "Average") return Average(name);
  if (cls == "Maximum") return Maximum(name);
  if (cls == "Minimum") return Minimum(name);
  if (cls == "Permute") return Permute(o.ints("dims"), name);
  if (cls == "RepeatVector") return RepeatVector(o.integer("n"), name);
  if (cls == "Identity") return Identity(name);
  if (cls == "GaussianNoise" || cls == "GaussianDropout") {
    const float v = static_cast<float>(o.number(cls == "GaussianNoise" ? "stddev" : "rate"));
    const auto seed = static_cast<uint64_t>(o.integer("seed", 0));
    return cls == "GaussianNoise" ? GaussianNoise(v, seed, name) : GaussianDropout(v, seed, name);
  }
  if (cls == "RandomFlip") {
    o.channels_last();
    return RandomFlip(o.str("mode", "horizontal_and_vertical"), static_cast<uint64_t>(o.integer("seed", 0)), name);
  }
  if (cls == "RandomTranslation" || cls == "RandomRotation" || cls == "RandomZoom") {
    o.channels_last();
    RandomAffineOptions ra;
    ra.fill_mode = o.str("fill_mode", "reflect");
    ra.interpolation = o.str("interpolation", "bilinear");
    ra.fill_value = static_cast<float>(o.number("fill_value", 0.0));
    ra.seed = static_cast<uint64_t>(o.integer("seed", 0));
    ra.name = name;
    if (cls == "RandomRotation") o.must_be_default("value_range", json::array({0, 255}));  // bounding boxes only
    auto factor = [&](const std::string& key, bool required) -> std::optional<FactorRange> {
      const json* f = o.number_or_pair(key, !required);
      if (!f) return std::nullopt;
      return f->is_number() ? FactorRange(f->get<float>()) : FactorRange((*f)[0].get<float>(), (*f)[1].get<float>());
    };
    if (cls == "RandomRotation") return RandomRotation(*factor("factor", true), ra);
    if (cls == "RandomTranslation")
      return RandomTranslation(*factor("height_factor", true), *factor("width_factor", true), ra);
    const std::optional<FactorRange> h = factor("height_factor", true);
    return RandomZoom(*h, factor("width_factor", false), ra);
  }
  if (cls == "Resizing") {
    const int64_t height = o.integer("height"), width = o.integer("width");
    ResizingOptions r;
    r.interpolation = o.str("interpolation", "bilinear");
    r.crop_to_aspect_ratio = o.boolean("crop_to_aspect_ratio", false);
    r.pad_to_aspect_ratio = o.boolean("pad_to_aspect_ratio", false);
    if (o.str("fill_mode", "constant") != "constant") o.unsupported("fill_mode", "Keras' resize pads with constants");
    r.fill_value = static_cast<float>(o.number("fill_value", 0.0));
    if (o.boolean("antialias", false)) o.unsupported("antialias", "trainkit resizes without antialiasing");
    o.channels_last();
    r.name = name;
    return Resizing(height, width, r);
  }
  if (cls == "Dot") {
    o.need("axes");
    const bool normalize = o.boolean("normalize", false);
    return Dot(*o.int_list("axes"), normalize, name);
  }
  if (cls == "CenterCrop") {
    o.channels_last();
    return CenterCrop(o.integer("height"), o.integer("width"), name);
  }
  if (cls == "RandomContrast") {
    o.channels_last();
    RandomContrastOptions rc;
    rc.seed = static_cast<uint64_t>(o.integer("seed", 0));
    rc.name = name;
    if (const json* vr = o.get("value_range")) {
      if (!vr->is_array() || vr->size() != 2 || !(*vr)[0].is_number() || !(*vr)[1].is_number())
        o.bad("value_range", "must be a (low, high) pair of numbers, got " + vr->dump());
      rc.value_range = {(*vr)[0].get<float>(), (*vr)[1].get<float>()};
    }
    const json* f = o.number_or_pair("factor");
    if (f->is_number()) return RandomContrast(f->get<float>(), rc);
    return RandomContrast((*f)[0].get<float>(), (*f)[1].get<float>(), rc);
  }
  if (cls == "ActivityRegularization")
    return ActivityRegularization(static_cast<float>(o.number("l1", 0.0)), static_cast<float>(o.number("l2", 0.0)),
                                  name);
  if (cls == "Cropping2D") {
    o.channels_last();
    const auto [top, bottom, left, right] = o.sides("cropping", 0);
    return Cropping2D(top, bottom, left, right, name);
  }
  if (cls == "Normalization") {
    NormalizationOptions n;
    n.axis.clear();  // axis: an int, a list, or null (Keras: one statistic for everything)
    if (const auto axis = o.int_list("axis")) n.axis.assign(axis->begin(), axis->end());
    if (!config.contains("axis")) n.axis = {-1};  // absent: Keras' default; null: ()
    n.invert = o.boolean("invert", false);
    // Given statistics: a number or a flat list (nested lists, Keras' multi-axis form, are not read).
    auto values = [&](const std::string& key) -> std::optional<std::vector<float>> {
      const json* v = o.get(key);
      if (!v) return std::nullopt;
      if (v->is_number()) return std::vector<float>{v->get<float>()};
      std::vector<float> out;
      if (!v->is_array()) o.bad(key, "must be a number, a list of numbers or null, got " + v->dump());
      for (const json& e : *v) {
        if (!e.is_number()) o.unsupported(key, "a number or a flat list of numbers, one per element of the axis");
        out.push_back(e.get<float>());
      }
      return out;
    };
    n.mean = values("mean");
    n.variance = values("variance");
    n.name = name;
    return Normalization(n);
  }
  // The convolution family (issue 31): grouped / depthwise convolutions.
  if (cls == "DepthwiseConv2D") {
    const Size2 k = o.pair("kernel_size");
    DepthwiseConv2DOptions d;
    const std::string act = read_conv2d(o, d, name);
    d.depth_multiplier = o.integer("depth_multiplier", 1);
    d.depthwise_initializer = o.initializer("depthwise_initializer", "glorot_uniform");
    return DepthwiseConv2D(k, act, d);
  }
  if (cls == "SeparableConv2D") {
    const int64_t filters = o.integer("filters");
    const Size2 k = o.pair("kernel_size");
    SeparableConv2DOptions sc;
    const std::string act = read_conv2d(o, sc, name);
    sc.depth_multiplier = o.integer("depth_multiplier", 1);
    sc.depthwise_initializer = o.initializer("depthwise_initializer", "glorot_uniform");
    sc.pointwise_initializer = o.initializer("pointwise_initializer", "glorot_uniform");
    return SeparableConv2D(filters, k, act, sc);
  }
  if (cls == "Conv2DTranspose") {
    const int64_t filters = o.integer("filters");
    const Size2 k = o.pair("kernel_size");
    Conv2DTransposeOptions t;
    const std::string act = read_conv2d(o, t, name);
    if (o.get("output_padding")) t.output_padding = o.pair("output_padding");
    t.kernel_initializer = o.initializer("kernel_initializer", "glorot_uniform");
    return Conv2DTranspose(filters, k, act, t);
  }
  if (LayerPtr l = attention_layer_from_json(cls, o, name)) return l;  // keras_layers_attention.cpp
  throw Unsupported(o.where() + ": trainkit has no layer class '" + cls + "' (supported: " + kSupported + ")");
}

}  // namespace

// Keras' to_snake_case: re.sub("(.)([A-Z][a-z]+)", r"\1_\2"), then re.sub("([a-z])([A-Z])", r"\1_\2"), then
// lower() — the two substitutions scanned left to right with non-overlapping matches, as re.sub does (written
// out: GCC 12's std::regex trips -Wmaybe-uninitialized in sanitizer builds).
std::string snake_case(const std::string& class_name) {
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  const std::string& in = class_name;
  std::string a;
  for (size_t i = 0; i < in.size();) {
    if (i + 2 < in.size() && upper(in[i + 1]) && lower(in[i + 2])) {  // (.)([A-Z][a-z]+)
      size_t j = i + 2;
      while (j < in.size() && lower(in[j])) ++j;
      a += in[i];
      a += '_';
      a.append(in, i + 1, j - i - 1);
      i = j;
    } else {
      a += in[i++];
    }
  }
  std::string s;
  for (size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && lower(a[i]) && upper(a[i + 1])) {  // ([a-z])([A-Z])
      s += a[i];
      s += '_';
      s += a[i + 1];
      i += 2;
    } else {
      s += a[i++];
    }
  }
  return ascii_lower(s);
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

json config_value_json(const LayerConfig::Value& v) {
  switch (v.kind) {
    case LayerConfig::Value::boolean:
      return v.b;
    case LayerConfig::Value::integer:
      return v.i;
    case LayerConfig::Value::number:
      return v.d;
    case LayerConfig::Value::string:
      return v.s;
    case LayerConfig::Value::integers:
      return v.ints;
    case LayerConfig::Value::numbers:
      return v.floats;
  }
  return nullptr;
}

json layer_to_json(const Layer& layer, const std::string& policy) {
  json config = json::object();
  if (auto* in = dynamic_cast<const nn::InputLayer*>(&layer)) {
    json shape = json::array({nullptr});
    for (int i = 1; i < in->batch_shape.rank(); ++i) shape.push_back(in->batch_shape[i]);
    config = {{"batch_shape", shape},
              {"dtype", std::string(dtype_name(in->dtype))},
              {"sparse", false},
              {"ragged", false},
              {"name", layer.name}};
    return keras_object_json("keras.layers", "InputLayer", config);
  }
  if (std::optional<json> rnn = rnn_layer_to_json(layer, policy)) return *rnn;  // keras_layers_rnn.cpp
  const std::string cls = layer.class_name();
  config["name"] = layer.name;
  // Their __init__ takes no trainable.
  if (cls != "SpatialDropout2D" && cls != "SpatialDropout1D") config["trainable"] = layer.trainable;
  config["dtype"] = dtype_policy_json(policy);
  for (const auto& [key, v] : layer.get_config().items) {
    json value = config_value_json(v);
    if (key.size() > 12 && key.ends_with("_initializer")) value = initializer_object(v.s);
    // trainkit's 0: from the global seed (Keras' None). Keras seeds are uint32: a drawn 64-bit seed is written
    // modulo 2^32 (dropout masks after a reload then differ from the original's; the weights do not).
    if (key == "seed") value = v.i == 0 ? json(nullptr) : json(static_cast<uint64_t>(v.i) & 0xFFFFFFFFu);
    if (cls == "Dropout" && key == "noise_shape")  // trainkit's -1: Keras' None (the input's dimension)
      for (json& d : value)
        if (d == -1) d = nullptr;
    if ((cls == "ZeroPadding2D" && key == "padding") || (cls == "Cropping2D" && key == "cropping"))
      value = json::array({json::array({v.ints[0], v.ints[1]}), json::array({v.ints[2], v.ints[3]})});
    config[key] = value;
  }
  for (const auto& [key, r] : layer.regularizers) config[key + "_regularizer"] = regularizer_json(r);
  write_constraints(config, layer);
  if (layer.activity_regularizer && cls != "ActivityRegularization")  // whose config holds l1 and l2 instead
    config["activity_regularizer"] = regularizer_json(*layer.activity_regularizer);
  return keras_object_json("keras.layers", cls, config);
}

LayerPtr layer_from_json(const json& obj, const std::string& label) {
  if (!obj.is_object() || !obj.contains("class_name") || !obj["class_name"].is_string())
    throw FormatError(label + ": a layer entry has no class_name (the config is damaged or not from Keras 3)");
  const std::string cls = obj["class_name"].get<std::string>();
  if (!obj.contains("config") || !obj["config"].is_object())
    throw FormatError(label + ": layer of class '" + cls + "' has no config object");
  const json& config = obj["config"];
  std::string name;
  if (config.contains("name") && config["name"].is_string()) name = config["name"].get<std::string>();
  if (name.empty()) throw FormatError(label + ": a layer of class '" + cls + "' has no name");
  if (obj.contains("registered_name") && obj["registered_name"].is_string() &&
      obj["registered_name"].get<std::string>() != cls)
    throw Unsupported(label + ": layer '" + name + "' is the custom class '" +
                      obj["registered_name"].get<std::string>() +
                      "', which trainkit cannot load (supported: " + kSupported + ")");
  Opts o(config, cls, name, label);
  // An InputLayer's "dtype" is its tensor's (int32 token ids), read by make_layer; other layers' is a dtype policy.
  const std::string policy = cls == "InputLayer" ? std::string() : check_dtype(config, o.where());
  LayerPtr layer;
  try {
    layer = make_layer(cls, o, name, config);
  } catch (const InvalidArgument& e) {  // a value the layer's constructor refuses
    throw Unsupported(o.where() + ": " + e.what());
  } catch (const json::exception& e) {
    throw FormatError(o.where() + ": " + e.what());
  }
  read_regularizers(o, cls, *layer);
  read_constraints(o, *layer);
  o.finish();
  if (config.contains("trainable")) {
    if (!config["trainable"].is_boolean()) o.bad("trainable", "must be true or false");
    layer->trainable = config["trainable"].get<bool>();
  }
  // An InputLayer's "dtype" is its tensor's; other layers keep the file's policy where it is not the one they were
  // made with (the global policy), as Keras' dtype= argument.
  if (!policy.empty() && policy != layer->dtype_policy() && !dynamic_cast<nn::InputLayer*>(layer.get()))
    layer->set_dtype_policy(policy);
  return layer;
}

std::string policy_in_config(const json& config, const std::string& where) { return check_dtype(config, where); }

}  // namespace tk::io::keras
