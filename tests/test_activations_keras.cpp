// Every Keras 3 activation name trainkit accepts, against Keras 3.15.1 (tests/fixtures/keras/activations/, made by
// gen_activations.py there): y = activation(x) and the gradient of sum(y * dy), through the Activation layer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "keras_text_fixture.h"
#include "nn/layers/context.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

using testing::load_keras_text;

class KerasActivation : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasActivation, ForwardAndGradientMatchKeras) {
  static const auto f =
      load_keras_text(std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/activations/activations_expect.txt");
  const std::string& name = GetParam();
  Tensor x = f.at("x").clone(), dy = f.at("dy").clone();
  LayerPtr layer = layers::Activation(name);
  graph::Graph g;
  nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
  const int xi = g.variable("x", x);
  const int y = layer->call(ctx, {xi});
  graph::OpBuilder b{g, nullptr, "loss"};
  const int loss =
      graph::ops::reduce(b, graph::ReduceFn::sum,
                         graph::ops::binary(b, graph::BinaryFn::multiply, y, g.variable("dy", dy)), {0, 1}, false);
  const int dx = graph::gradients(g, {loss}, {xi})[0];
  ASSERT_GE(dx, 0);
  graph::Program p(std::move(g), {y, dx}, {}, Device::cpu());
  p.run(graph::ExecContext{});
  for (const auto& [what, id] : {std::pair<std::string, int>{"/y", y}, {"/dx", dx}}) {
    const Tensor got = p.output(id);
    const Tensor& want = f.at(name + what);
    double worst = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double w = want.data<float>()[i];
      worst = std::max(worst, std::abs(got.data<float>()[i] - w) / std::max(1.0, std::abs(w)));
    }
    EXPECT_LE(worst, 2e-6) << name << what;  // float32 transcendentals of two libraries: a few ulp
  }
}

INSTANTIATE_TEST_SUITE_P(Names, KerasActivation,
                         ::testing::Values("relu", "sigmoid", "tanh", "softmax", "gelu", "elu", "leaky_relu", "relu6",
                                           "selu", "softplus", "softsign", "silu", "swish", "hard_sigmoid", "hard_silu",
                                           "hard_swish", "exponential", "mish", "log_softmax", "log_sigmoid",
                                           "linear"));

TEST(KerasActivationNames, AnUnknownNameListsTheKnownOnes) {
  try {
    layers::Activation("sigmoidal");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("hard_swish"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk
