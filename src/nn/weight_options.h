// Which weight of a layer a Keras per-weight option names: the `key` of <key>_regularizer and <key>_constraint
// ("kernel", "bias", "recurrent", ...), shared by Layer::regularizer_of and Layer::constraint_of.
#pragma once
#include <cmath>
#include <map>
#include <string>

#include "trainkit/core/error.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

// The keys of Keras' <key>_regularizer / <key>_constraint options across its layers.
inline constexpr const char* kWeightOptionKeys[] = {"kernel",     "bias",  "recurrent", "depthwise", "pointwise",
                                                    "embeddings", "gamma", "beta",      "alpha"};

// A weight is named "<layer>/<what>" ("lstm/recurrent_kernel", "mha/query/kernel"): the key "kernel" names every
// "kernel" (MultiHeadAttention's four, as Keras hands kernel_regularizer to each of its dense sub-layers),
// "recurrent" / "depthwise" / "pointwise" their "<key>_kernel", and DepthwiseConv2D's depthwise_* option its
// "kernel" (Keras 3 names that weight kernel).
template <typename T>
const T* option_of(const Layer& layer, const std::map<std::string, T>& options, const Weight& w) {
  if (options.empty()) return nullptr;
  const std::string what = w.name.substr(w.name.rfind('/') + 1);
  for (const auto& [key, value] : options)
    if (what == key || what == key + "_kernel" ||
        (key == "depthwise" && what == "kernel" && layer.class_name() == "DepthwiseConv2D"))
      return &value;
  return nullptr;
}

// `v`, or an InvalidArgument "<family>.<cls>: <what> must be a finite number >= 0" (the factories' bounds; family:
// "constraints" or "regularizers").
inline float finite_non_negative(float v, const char* family, const char* cls, const char* what) {
  if (!std::isfinite(v) || v < 0.0f)
    throw InvalidArgument(std::string(family) + "." + cls + ": " + what + " must be a finite number >= 0, got " +
                          std::to_string(v));
  return v;
}

// InvalidArgument naming the layer for a key that is none of Keras' options (a typo would otherwise apply to nothing);
// `field` is "regularizers" or "constraints".
template <typename T>
void check_option_keys(const Layer& layer, const std::map<std::string, T>& options, const char* field,
                       const char* option) {
  for (const auto& [key, value] : options) {
    bool known = false;
    for (const char* k : kWeightOptionKeys) known = known || key == k;
    if (!known)
      throw InvalidArgument("layer '" + layer.name + "' (" + layer.class_name() + "): " + field + "[\"" + key +
                            "\"] names no Keras option (kernel, bias, recurrent, depthwise, pointwise, embeddings, "
                            "gamma, beta, alpha: the prefix of Keras' <key>_" +
                            option + ")");
  }
}

}  // namespace tk::nn
