// Keras' regularizers (trainkit/nn/regularizers.h): the factories, which weight of a layer a key names, and the
// penalty a traced program adds to the loss (nn/compiler/regularization.h).
#include "trainkit/nn/regularizers.h"

#include <cmath>
#include <string>

#include "graph/tensor_ops.h"
#include "nn/compiler/regularization.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layer.h"

namespace tk {
namespace {

float checked(float v, const char* what, const char* cls) {
  if (!std::isfinite(v) || v < 0.0f)
    throw InvalidArgument(std::string("regularizers.") + cls + ": " + what + " must be a finite number >= 0, got " +
                          std::to_string(v));
  return v;
}

// The keys of Keras' <key>_regularizer options across its layers.
constexpr const char* kKeys[] = {"kernel",     "bias",  "recurrent", "depthwise", "pointwise",
                                 "embeddings", "gamma", "beta",      "alpha"};

}  // namespace

Regularizer regularizers::L1(float l1) { return {Regularizer::Kind::l1, checked(l1, "l1", "L1"), 0.0f}; }
Regularizer regularizers::L2(float l2) { return {Regularizer::Kind::l2, 0.0f, checked(l2, "l2", "L2")}; }
Regularizer regularizers::L1L2(float l1, float l2) {
  return {Regularizer::Kind::l1_l2, checked(l1, "l1", "L1L2"), checked(l2, "l2", "L1L2")};
}

// A weight is named "<layer>/<what>" ("lstm/recurrent_kernel", "mha/query/kernel"): the key "kernel" names every
// "kernel" (MultiHeadAttention's four, as Keras hands kernel_regularizer to each of its dense sub-layers),
// "recurrent" / "depthwise" / "pointwise" their "<key>_kernel", and DepthwiseConv2D's depthwise_regularizer its
// "kernel" (Keras 3 names that weight kernel).
const Regularizer* Layer::regularizer_of(const Weight& w) const {
  if (regularizers.empty()) return nullptr;
  const std::string what = w.name.substr(w.name.rfind('/') + 1);
  for (const auto& [key, r] : regularizers)
    if (what == key || what == key + "_kernel" ||
        (key == "depthwise" && what == "kernel" && class_name() == "DepthwiseConv2D"))
      return &r;
  return nullptr;
}

namespace nn {

void check_regularizer_keys(const Layer& layer) {
  for (const auto& [key, r] : layer.regularizers) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known)
      throw InvalidArgument("layer '" + layer.name + "' (" + layer.class_name() + "): regularizers[\"" + key +
                            "\"] names no Keras option (kernel, bias, recurrent, depthwise, pointwise, embeddings, "
                            "gamma, beta, alpha: the prefix of Keras' <key>_regularizer)");
  }
}

int emit_penalty(graph::Graph& g, const Regularizer& r, int x, float scale, const std::string& name) {
  namespace o = graph::ops;
  graph::OpBuilder b{g, nullptr, name};
  if (g[x].dtype != DType::f32) x = o::cast(b, x, DType::f32);
  std::vector<int> axes;
  for (int i = 0; i < g[x].shape.rank(); ++i) axes.push_back(i);
  auto sum_of = [&](graph::UnaryFn f) { return o::reduce(b, graph::ReduceFn::sum, o::unary(b, f, x), axes, false); };
  int total = -1;
  if (r.l1 != 0.0f) total = o::mul_scalar(b, sum_of(graph::UnaryFn::abs), r.l1 * scale);
  if (r.l2 != 0.0f) {
    const int l2 = o::mul_scalar(b, sum_of(graph::UnaryFn::square), r.l2 * scale);
    total = total < 0 ? l2 : o::binary(b, graph::BinaryFn::add, total, l2);
  }
  return total;  // -1: both factors 0
}

}  // namespace nn
}  // namespace tk
