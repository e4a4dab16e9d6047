// Keras 3's losses (nn/compiler/losses.h) against Keras itself: each case of
// tests/fixtures/keras/losses/gen_losses.py (the loss object as Keras' compile_config holds it, read by trainkit's
// reader; fixed inputs) gives Keras' loss value and its gradient with respect to y_pred, which trainkit's loss must
// match; every loss's gradient also against central differences (the op harness), NaN predictions give a NaN loss
// (TensorFlow's rule), and the bad-input errors name what is known.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "nn/compiler/losses.h"
#include "op_harness.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/losses.h"

namespace tk {
namespace {
namespace h = graph::harness;
using io::keras::json;

const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/losses/";

const std::map<std::string, Tensor>& fixture() {
  static const auto f = testing::load_keras_text(kDir + "losses_expect.txt");
  return f;
}
const json& configs() {
  static const json j = [] {
    std::ifstream in(kDir + "configs.json");
    std::stringstream s;
    s << in.rdbuf();
    return io::keras::parse_json(s.str(), "configs.json");
  }();
  return j;
}

const std::vector<std::string> kCases = {
    "mae",     "mae_seq",       "huber",         "huber_delta2",    "kld",
    "kld_seq", "bce_ls",        "bce_logits_ls", "cce_ls",          "cce_logits_ls_seq",
    "focal",   "focal_options", "scce_ignore",   "scce_ignore_seq", "scce_ignore_seq_logits",
    "msle",    "poisson",       "cosine",        "hinge",           "squared_hinge"};

// The case's loss, read from the object Keras serialized (what a .keras compile_config holds).
Loss case_loss(const std::string& name) {
  Loss l = io::keras::loss_from_json(configs().at(name), name);
  // Keras 3.15's Huber.get_config leaves delta out; the fixture's object was Huber(delta=2).
  if (name == "huber_delta2") l.delta = 2.0f;
  return l;
}

// The harness case for one loss over the fixture's inputs (input 0 y_pred, differentiable; input 1 y_true).
h::Case loss_case(const std::string& name, const Loss& loss) {
  const Tensor& p = fixture().at(name + "/y_pred");
  const Tensor& t = fixture().at(name + "/y_true");
  h::Case c;
  c.label = "Loss " + name;
  c.op = graph::Op::Unary;
  c.inputs = {p.shape(), t.shape()};
  c.differentiable = {true, false};
  if (nn::is_sparse(loss)) c.dtypes = {std::nullopt, DType::i32};
  c.init = [p, t](int i, float* v, int64_t n, std::mt19937&) {
    const Tensor& src = i == 0 ? p : t;
    for (int64_t k = 0; k < n; ++k) v[k] = src.data<float>()[k];
  };
  c.fd_step = 1e-3f;
  c.build = [loss](graph::Graph& g, const std::vector<int>& in, const graph::Attrs&) {
    return std::vector<int>{nn::emit_loss(g, loss, in[0], in[1], "loss")};
  };
  return c;
}

double rel_err(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); }

class KerasLoss : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasLoss, ValueAndGradientMatchKeras) {
  const std::string name = GetParam();
  const Loss loss = case_loss(name);
  const h::Case c = loss_case(name, loss);
  const h::Target cpu{DeviceKind::cpu, DType::f32};
  std::vector<Tensor> inputs = h::convert_inputs(c, h::generate_inputs(c, 1), DType::f32);
  h::Instance inst(c, cpu, inputs);
  const std::vector<int> dx = inst.append_gradients(Tensor::full(Shape{}, 1.0f));
  ASSERT_GE(dx[0], 0);
  auto prog = inst.program({inst.checked[0], dx[0]});
  prog->run(inst.context());
  const float value = h::host_f32(prog->output(inst.checked[0])).data<float>()[0];
  const float want = fixture().at(name + "/loss").data<float>()[0];
  EXPECT_LE(rel_err(value, want), 1e-5) << name << ": " << value << " vs Keras " << want;
  const Tensor grad = h::host_f32(prog->output(dx[0]));
  const Tensor& kgrad = fixture().at(name + "/grad");
  ASSERT_EQ(grad.shape(), kgrad.shape());
  double scale = 0;
  for (int64_t k = 0; k < kgrad.numel(); ++k) scale = std::max(scale, double(std::abs(kgrad.data<float>()[k])));
  for (int64_t k = 0; k < kgrad.numel(); ++k)
    EXPECT_NEAR(grad.data<float>()[k], kgrad.data<float>()[k], 1e-5 * scale) << name << " d/dy_pred[" << k << "]";
}

TEST_P(KerasLoss, GradientMatchesCentralDifferences) {
  const std::string name = GetParam();
  h::check_finite_differences(loss_case(name, case_loss(name)));
}

TEST_P(KerasLoss, NaNPredictionGivesNaNLoss) {
  const std::string name = GetParam();
  const Loss loss = case_loss(name);
  const h::Case c = loss_case(name, loss);
  std::vector<Tensor> inputs = h::convert_inputs(c, h::generate_inputs(c, 1), DType::f32);
  inputs[0].data<float>()[0] = std::nanf("");  // position 0 is never an ignored one in the fixtures
  h::Instance inst(c, h::Target{DeviceKind::cpu, DType::f32}, inputs);
  EXPECT_TRUE(std::isnan(inst.run_forward()[0].data<float>()[0])) << name;
}

TEST_P(KerasLoss, ConfigWritesBackAsKerasWroteIt) {
  const std::string name = GetParam();
  const json written = io::keras::loss_to_json(case_loss(name));
  json want = configs().at(name);
  if (name == "huber_delta2") want["config"]["delta"] = 2.0;  // Keras drops it; its constructor reads it back
  EXPECT_EQ(written["class_name"], want["class_name"]);
  EXPECT_EQ(written["module"], want["module"]);
  for (const auto& [key, value] : want["config"].items()) {
    ASSERT_TRUE(written["config"].contains(key)) << name << " misses " << key;
    if (value.is_number())
      EXPECT_NEAR(written["config"][key].get<double>(), value.get<double>(), 1e-7) << name << " " << key;
    else
      EXPECT_EQ(written["config"][key], value) << name << " " << key;
  }
  EXPECT_EQ(written["config"].size(), want["config"].size()) << written.dump();
}

INSTANTIATE_TEST_SUITE_P(Fixture, KerasLoss, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param; });

TEST(KerasLossIgnoreClass, NaNAtAnIgnoredPositionStaysOut) {
  // Keras replaces the ignored positions' predictions before the crossentropy: a NaN there is not the loss's.
  const Loss loss = case_loss("scce_ignore");
  const h::Case c = loss_case("scce_ignore", loss);
  std::vector<Tensor> inputs = h::convert_inputs(c, h::generate_inputs(c, 1), DType::f32);
  ASSERT_EQ(inputs[1].data<int32_t>()[1], -1);
  inputs[0].data<float>()[1 * 5 + 2] = std::nanf("");  // row 1 is ignored
  h::Instance inst(c, h::Target{DeviceKind::cpu, DType::f32}, inputs);
  EXPECT_NEAR(inst.run_forward()[0].data<float>()[0], fixture().at("scce_ignore/loss").data<float>()[0], 1e-5);
}

TEST(KerasLossNames, KerasNamesAndAliasesResolve) {
  EXPECT_EQ(nn::canonical_loss_name("mae"), "mean_absolute_error");
  EXPECT_EQ(nn::canonical_loss_name("MeanAbsoluteError"), "mean_absolute_error");
  EXPECT_EQ(nn::canonical_loss_name("kld"), "kl_divergence");
  EXPECT_EQ(nn::canonical_loss_name("KLDivergence"), "kl_divergence");
  EXPECT_EQ(nn::canonical_loss_name("Huber"), "huber");
  EXPECT_EQ(nn::canonical_loss_name("msle"), "mean_squared_logarithmic_error");
  EXPECT_EQ(nn::canonical_loss_name("mse"), "mean_squared_error");
  EXPECT_EQ(losses::Huber({.delta = 2}).delta, 2.0f);
  EXPECT_EQ(io::keras::loss_from_json(json("huber"), "t").name, "huber");
}

TEST(KerasLossNames, UnknownLossListsTheKnownOnes) {
  try {
    nn::validate_loss(Loss("hubber"));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'hubber'"), std::string::npos) << m;
    EXPECT_NE(m.find("huber"), std::string::npos) << m;
    EXPECT_NE(m.find("binary_focal_crossentropy"), std::string::npos) << m;
  }
  EXPECT_THROW(io::keras::loss_from_json(json("hubber"), "t"), Unsupported);
  json bad = configs().at("huber");
  bad["class_name"] = "LogCosh";
  try {
    io::keras::loss_from_json(bad, "m.keras");
    FAIL() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("BinaryFocalCrossentropy"), std::string::npos) << e.what();
  }
}

TEST(KerasLossNames, OptionsALossDoesNotHaveOrOutOfRangeAreErrors) {
  EXPECT_THROW(nn::validate_loss(losses::BinaryCrossentropy({.label_smoothing = 1.5f})), InvalidArgument);
  EXPECT_THROW(nn::validate_loss(losses::Huber({.delta = 0})), InvalidArgument);
  Loss mae = losses::MeanAbsoluteError();
  mae.label_smoothing = 0.1f;
  EXPECT_THROW(nn::validate_loss(mae), InvalidArgument);
  Loss cce = losses::CategoricalCrossentropy();
  cce.ignore_class = 1;
  EXPECT_THROW(nn::validate_loss(cce), InvalidArgument);
  EXPECT_THROW(nn::validate_loss(losses::BinaryFocalCrossentropy({.gamma = -1})), InvalidArgument);
  EXPECT_NO_THROW(nn::validate_loss(losses::SparseCategoricalCrossentropy({.ignore_class = 255})));
}

}  // namespace
}  // namespace tk
