// Parity with Keras 3 for the image layers: forward values, input gradients and weight gradients of
// L = sum(y * r) (tests/fixtures/cnn_layers.txt, made by gen_cnn_parity.py), and 8 training steps of a
// small CNN with BatchNormalization.
#include <gtest/gtest.h>

#include <functional>

#include "fixture.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "nn/layers/context.h"
#include "program_feeder.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
using namespace layers;

std::map<std::string, Tensor>& fixture() {
  static auto f = testing::load_fixture(testing::fixture_path("cnn_layers.txt"));
  return f;
}

double max_abs_diff(const float* a, const Tensor& ref) {
  double m = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) m = std::max(m, double(std::abs(a[i] - ref.data<float>()[i])));
  return m;
}

// max |a - ref| / max |ref|: the error relative to the tensor's scale (elementwise relative errors blow up
// near zero, where float32 rounding of a sum is not relative to the term).
double relative_diff(const Tensor& a, const Tensor& ref) {
  double m = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) m = std::max(m, double(std::abs(ref.data<float>()[i])));
  const double d = max_abs_diff(a.data<float>(), ref);
  return m == 0 ? d : d / m;
}

struct LayerCase {
  std::string name;
  std::function<LayerPtr()> make;
  bool training = false;
  bool exact_forward = false;  // max pooling, padding, upsampling: a selection or a copy, no arithmetic
  double dw_rtol = 1e-5;       // 0: no weights (pooling, padding, upsampling: 1e-6 for y and dx)
};

class KerasLayerParity : public ::testing::TestWithParam<LayerCase> {};

// Builds y = layer(x) and L = MSE(y, t) with t = y - r * numel / 2, so that dL/dy = r exactly: the
// gradients of L are those of sum(y * r) that Keras recorded.
TEST_P(KerasLayerParity, ForwardAndGradientsMatchKeras) {
  const LayerCase& c = GetParam();
  auto& f = fixture();
  const Tensor& x = f.at(c.name + "/x");
  const Tensor& r = f.at(c.name + "/r");
  LayerPtr layer = c.make();
  (*layer)(tk::Input(x.shape().sample_shape()));  // builds the weights
  for (size_t i = 0; i < layer->weights().size(); ++i) {
    const Tensor& w = f.at(c.name + "/w" + std::to_string(i));
    ASSERT_EQ(w.shape(), layer->weights()[i].value.shape()) << "weight " << i;
    std::memcpy(layer->weights()[i].value.raw(), w.raw(), w.nbytes());
  }
  graph::Graph g;
  nn::CallContext ctx{g, c.training, DType::f32, {}, {}, {}};
  const int xi = g.input("x", x.shape());
  const int y = layer->call(ctx, {xi});
  const int t = g.input("t", g[y].shape);
  const int loss = g.add(graph::Op::MseLoss, {y, t});
  std::vector<int> wrt{xi};
  std::vector<int> trainable;
  for (const Weight& w : layer->weights())
    if (w.trainable) wrt.push_back(ctx.variable(w));
  std::vector<int> grads = graph::gradients(g, {loss}, wrt);
  std::vector<int> outs{y, loss};
  for (int gr : grads) {
    ASSERT_GE(gr, 0);
    outs.push_back(gr);
  }
  graph::Program p(std::move(g), outs, ctx.sinks, Device::cpu());
  std::memcpy(testing::ProgramFeeder::input<float>(p, xi), x.raw(), x.nbytes());
  graph::ExecContext ec;
  ec.training = c.training;
  p.run(ec);  // the first run also applies BatchNormalization's moving-statistics update once
  const Tensor y_out = p.output(y);
  // Errors relative to the reference tensor's largest magnitude. Measured on an AVX-512 machine (AMD EPYC), both
  // convolution backends: conv and BatchNormalization forward <= 1e-7, dL/dx <= 2.3e-7, dL/dw <= 5e-7;
  // average pooling forward <= 5.4e-8; pooling, padding and upsampling dL/dx <= 1.4e-7 (the harness's dL/dy = r
  // is itself rounded once). Limits 1e-5 and 1e-6: 7-20x that, for machines whose kernels round differently
  // (AVX2: other blocking and FMA order). Max pooling, padding and upsampling forward: exact.
  const double fwd = relative_diff(y_out, f.at(c.name + "/y"));
  if (c.exact_forward)
    EXPECT_EQ(fwd, 0.0) << "forward: a max, a copy or zeros must be bit-exact";
  else
    EXPECT_LE(fwd, c.dw_rtol == 0 ? 1e-6 : 1e-5) << "forward";
  if (c.name == "bn_train") {
    EXPECT_LE(max_abs_diff(layer->weights()[2].value.data<float>(), f.at("bn_train/moving_mean_after")), 1e-6);
    EXPECT_LE(max_abs_diff(layer->weights()[3].value.data<float>(), f.at("bn_train/moving_variance_after")), 1e-6);
  }
  const int64_t n = r.numel();
  float* target = testing::ProgramFeeder::input<float>(p, t);
  for (int64_t i = 0; i < n; ++i) target[i] = y_out.data<float>()[i] - r.data<float>()[i] * float(n) / 2.0f;
  p.run(ec);
  const double dx = relative_diff(p.output(grads[0]), f.at(c.name + "/dx"));
  EXPECT_LE(dx, c.dw_rtol == 0 ? 1e-6 : 1e-5) << "dL/dx";
  double dw = 0;
  for (size_t k = 1; k < grads.size(); ++k) {
    const double d = relative_diff(p.output(grads[k]), f.at(c.name + "/dw" + std::to_string(k - 1)));
    dw = std::max(dw, d);
    EXPECT_LE(d, c.dw_rtol) << "dL/dw" << k - 1;
  }
  std::printf("[ layer ] %-20s relative: y %.2e  dx %.2e  dw %.2e\n", c.name.c_str(), fwd, dx, dw);
}

INSTANTIATE_TEST_SUITE_P(
    Layers, KerasLayerParity,
    ::testing::Values(
        LayerCase{"conv_valid", [] { return Conv2D(3, 3); }},
        LayerCase{"conv_same_odd",
                  [] {
                    return Conv2D(4, {3, 2}, "linear", {.padding = "same"});
                  }},
        LayerCase{"conv_stride2_same", [] { return Conv2D(3, 3, "linear", {.strides = 2, .padding = "same"}); }},
        LayerCase{"conv_stride2_valid",
                  [] {
                    return Conv2D(2, {2, 3}, "linear", {.strides = {2, 1}});
                  }},
        LayerCase{"conv_dilation2", [] { return Conv2D(3, 3, "linear", {.padding = "same", .dilation_rate = 2}); }},
        LayerCase{"conv_nobias_5x5", [] { return Conv2D(5, 5, "linear", {.padding = "same", .use_bias = false}); }},
        LayerCase{"maxpool_2", [] { return MaxPooling2D(2); }, false, true, 0},
        LayerCase{"maxpool_3s2_same", [] { return MaxPooling2D(3, {.strides = 2, .padding = "same"}); }, false, true,
                  0},
        LayerCase{"maxpool_ties", [] { return MaxPooling2D(3, {.strides = 2, .padding = "same"}); }, false, true, 0},
        LayerCase{"avgpool_2", [] { return AveragePooling2D(2); }, false, false, 0},
        LayerCase{"avgpool_3s2_same", [] { return AveragePooling2D(3, {.strides = 2, .padding = "same"}); }, false,
                  false, 0},
        LayerCase{"avgpool_2_same_odd", [] { return AveragePooling2D(2, {.padding = "same"}); }, false, false, 0},
        LayerCase{"gap", [] { return GlobalAveragePooling2D(); }, false, false, 0},
        LayerCase{"gmp", [] { return GlobalMaxPooling2D(); }, false, true, 0},
        LayerCase{"gmp_ties", [] { return GlobalMaxPooling2D(); }, false, true, 0},
        LayerCase{"zeropad", [] { return ZeroPadding2D(1, 2, 3, 0); }, false, true, 0},
        LayerCase{"upsample",
                  [] {
                    return UpSampling2D({2, 3});
                  },
                  false, true, 0},
        LayerCase{"bn_train", [] { return BatchNormalization(); }, true},
        LayerCase{"bn_infer", [] { return BatchNormalization(); }, false}),
    [](const auto& info) { return info.param.name; });

TEST(KerasCnnParity, EightTrainingStepsWithBatchNormalizationMatchKeras) {
  auto& f = fixture();
  Sequential model({layers::Input({8, 8, 1}), Conv2D(4, 3, "relu", {.padding = "same"}), MaxPooling2D(2),
                    Conv2D(6, 3, "relu", {.padding = "same"}), BatchNormalization(), MaxPooling2D(2), Flatten(),
                    Dense(10)});
  std::vector<Tensor> w;
  for (int i = 0; i < 10; ++i) w.push_back(f.at("cnn_steps/w" + std::to_string(i)));
  model.set_weights(w);
  optimizers::SGDOptions sgd;
  sgd.learning_rate = 0.05f;
  sgd.momentum = 0.9f;
  model.compile(optimizers::SGD(sgd), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const Tensor& x = f.at("cnn_steps/x");
  const Tensor& y = f.at("cnn_steps/y");
  const Tensor& want = f.at("cnn_steps/losses");
  double worst_loss = 0;  // measured (AVX-512, both conv backends): 9.5e-7; weights 1.5e-6
  for (int s = 0; s < 8; ++s) {
    const double got =
        model.train_on_batch({x.slice_rows(8 * s, 8 * s + 8)}, {y.slice_rows(8 * s, 8 * s + 8)}).get("loss");
    EXPECT_NEAR(got, want.data<float>()[s], 1e-5 * std::max(1.0, std::abs(double(want.data<float>()[s]))))
        << "step " << s;
    worst_loss = std::max(worst_loss, std::abs(got - want.data<float>()[s]));
  }
  std::vector<Tensor> final_w = model.get_weights();
  double worst = 0;
  for (size_t i = 0; i < final_w.size(); ++i) {
    const double d = max_abs_diff(final_w[i].data<float>(), f.at("cnn_steps/final_w" + std::to_string(i)));
    worst = std::max(worst, d);
    EXPECT_LE(d, 2e-5) << "weight " << i;
  }
  std::printf("[ cnn steps ] max loss difference %.2e, max weight difference %.2e\n", worst_loss, worst);
}

}  // namespace
}  // namespace tk
