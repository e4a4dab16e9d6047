// Keras' regularizers (trainkit/nn/regularizers.h): the factories, which weight of a layer a key names, and the
// penalty a traced program adds to the loss (nn/compiler/regularization.h).
#include "trainkit/nn/regularizers.h"

#include <string>

#include "graph/tensor_ops.h"
#include "nn/compiler/losses.h"
#include "nn/compiler/regularization.h"
#include "nn/weight_options.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layer.h"

namespace tk {
namespace {
float checked(float v, const char* what, const char* cls) {
  return nn::finite_non_negative(v, "regularizers", cls, what);
}
}  // namespace

Regularizer regularizers::L1(float l1) { return {Regularizer::Kind::l1, checked(l1, "l1", "L1"), 0.0f}; }
Regularizer regularizers::L2(float l2) { return {Regularizer::Kind::l2, 0.0f, checked(l2, "l2", "L2")}; }
Regularizer regularizers::L1L2(float l1, float l2) {
  return {Regularizer::Kind::l1_l2, checked(l1, "l1", "L1L2"), checked(l2, "l2", "L1L2")};
}

const Regularizer* Layer::regularizer_of(const Weight& w) const { return nn::option_of(*this, regularizers, w); }

namespace nn {

void check_regularizer_keys(const Layer& layer) {
  check_option_keys(layer, layer.regularizers, "regularizers", "regularizer");
}

int emit_penalty(graph::Graph& g, const Regularizer& r, int x, float scale, const std::string& name) {
  namespace o = graph::ops;
  graph::OpBuilder b{g, nullptr, name};
  if (g[x].dtype != DType::f32) x = o::cast(b, x, DType::f32);
  auto sum_of = [&](graph::UnaryFn f) { return reduce_all_axes(b, graph::ReduceFn::sum, o::unary(b, f, x)); };
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
