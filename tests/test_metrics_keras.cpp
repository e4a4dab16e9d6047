// Keras 3's metrics (nn/compiler/metrics.h) against Keras itself (tests/fixtures/keras/losses/gen_losses.py): each
// metric, read from the object Keras serialized, updated over three batches through trainkit's epoch accumulator
// (nn::Accumulator: batch means row-weighted, a stateful metric's counts summed), must give Keras' result() after the
// same three update_state calls. Then end to end: two Keras-compiled .keras files (Huber with Precision, Recall, AUC
// and mae; SparseCategoricalCrossentropy(ignore_class) with top-k accuracy and MeanIoU) evaluate to Keras' numbers,
// also through the lagged-log path, and compile_config is written back as Keras wrote it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "nn/compiler/metrics.h"
#include "nn/training/fit_common.h"
#include "op_harness.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/metrics.h"

namespace tk {
namespace {
namespace h = graph::harness;
using io::keras::json;

const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/losses/";

const std::map<std::string, Tensor>& fixture() {
  static const auto f = testing::load_keras_text(kDir + "metrics_expect.txt");
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

bool sparse_targets(const std::string& kind) {
  return kind == "sparse_top_k_categorical_accuracy" || kind == "mean_io_u";
}

// One batch's log values of `m` (flat, as a program's logs are read) and its stat.
std::pair<std::vector<float>, nn::LogStat> batch_values(const Metric& m, const Tensor& p, const Tensor& t) {
  const bool sparse = sparse_targets(nn::metric_kind(m));
  const Loss loss = sparse ? Loss("sparse_categorical_crossentropy") : Loss("binary_crossentropy");
  auto stat = std::make_shared<nn::LogStat>();
  h::Case c;
  c.label = "Metric " + m.name;
  c.op = graph::Op::Unary;
  c.inputs = {p.shape(), t.shape()};
  c.differentiable = {false, false};
  if (sparse) c.dtypes = {std::nullopt, DType::i32};
  c.init = [p, t](int i, float* v, int64_t n, std::mt19937&) {
    const Tensor& src = i == 0 ? p : t;
    for (int64_t k = 0; k < n; ++k) v[k] = src.data<float>()[k];
  };
  c.build = [m, loss, stat](graph::Graph& g, const std::vector<int>& in, const graph::Attrs&) {
    auto [value, s] = nn::emit_metric(g, m, loss, in[0], in[1], m.name);
    *stat = s;
    return std::vector<int>{value};
  };
  std::vector<Tensor> inputs = h::convert_inputs(c, h::generate_inputs(c, 1), DType::f32);
  h::Instance inst(c, h::Target{DeviceKind::cpu, DType::f32}, inputs);
  const Tensor out = inst.run_forward()[0];
  std::vector<float> v(out.data<float>(), out.data<float>() + out.numel());
  EXPECT_EQ(static_cast<int64_t>(v.size()), stat->width) << m.name;
  return {v, *stat};
}

class KerasMetric : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasMetric, EpochValueOverThreeBatchesMatchesKeras) {
  const std::string name = GetParam();
  const Metric m = io::keras::metric_from_json(configs().at(name), name);
  nn::Accumulator acc;
  for (int b = 0; b < 3; ++b) {
    const Tensor& p = fixture().at(name + "/y_pred" + std::to_string(b));
    const Tensor& t = fixture().at(name + "/y_true" + std::to_string(b));
    auto [values, stat] = batch_values(m, p, t);
    acc.add_values({m.name}, {stat}, values.data(), p.shape()[0]);
  }
  Logs logs;
  acc.write(logs);
  const double want = fixture().at(name + "/result").data<float>()[0];
  EXPECT_NEAR(logs.get(m.name), want, 1e-6 * std::max(1.0, std::abs(want))) << name;
}

TEST_P(KerasMetric, ConfigWritesBackAsKerasWroteIt) {
  const std::string name = GetParam();
  const json written = io::keras::metric_to_json(io::keras::metric_from_json(configs().at(name), name));
  const json& want = configs().at(name);
  EXPECT_EQ(written["class_name"], want["class_name"]);
  for (const auto& [key, value] : want["config"].items()) {
    ASSERT_TRUE(written["config"].contains(key)) << name << " misses " << key;
    if (value.is_number())
      EXPECT_NEAR(written["config"][key].get<double>(), value.get<double>(), 1e-7) << name << " " << key;
    else
      EXPECT_EQ(written["config"][key], value) << name << " " << key;
  }
  EXPECT_EQ(written["config"].size(), want["config"].size()) << written.dump();
}

INSTANTIATE_TEST_SUITE_P(Fixture, KerasMetric,
                         ::testing::Values("top_k", "top_k_default", "sparse_top_k", "precision", "recall",
                                           "precision_t", "recall_t", "auc", "auc_pr", "auc_minoring",
                                           "auc_pr_majoring", "mean_iou", "mean_iou_seq", "mae_metric", "mse_metric"),
                         [](const auto& info) { return std::string(info.param); });

TEST(KerasMetricStateful, PrecisionIsTheEpochsCountsNotAMeanOfBatches) {
  // Batch 1: 1 of 1 predicted positives is right; batch 2: 1 of 3. Keras: 2 / 4 = 0.5 (a mean of batches: 0.667).
  const Metric m = metrics::Precision();
  nn::Accumulator acc;
  Tensor tp1 = Tensor::from_vector<float>({2, 1}, {0.9f, 0.1f});
  Tensor tt1 = Tensor::from_vector<float>({2, 1}, {1, 0});
  Tensor tp2 = Tensor::from_vector<float>({3, 1}, {0.9f, 0.8f, 0.7f});
  Tensor tt2 = Tensor::from_vector<float>({3, 1}, {1, 0, 0});
  for (auto [p, t] : {std::pair{&tp1, &tt1}, std::pair{&tp2, &tt2}}) {
    auto [values, stat] = batch_values(m, *p, *t);
    acc.add_values({"precision"}, {stat}, values.data(), p->shape()[0]);
  }
  nn::Accumulator replica;  // data parallel: a replica's counts add to the others'
  auto [values, stat] = batch_values(m, tp1, tt1);
  replica.add_values({"precision"}, {stat}, values.data(), 2);
  acc.merge(replica);
  Logs logs;
  acc.write(logs);
  EXPECT_DOUBLE_EQ(logs.get("precision"), 3.0 / 5.0);
}

TEST(KerasMetricErrors, UnknownNamesListTheKnownOnesAndOptionsAreChecked) {
  try {
    nn::validate_metric(Metric("precission"));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string s = e.what();
    EXPECT_NE(s.find("'precission'"), std::string::npos) << s;
    EXPECT_NE(s.find("precision"), std::string::npos) << s;
    EXPECT_NE(s.find("mean_io_u"), std::string::npos) << s;
  }
  try {
    nn::validate_metric(metrics::MeanIoU());
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("num_classes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::validate_metric(Metric("mean_io_u")), InvalidArgument);
  try {
    nn::validate_metric(metrics::TopKCategoricalAccuracy({.k = 0}));
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("k must be >= 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::validate_metric(metrics::AUC({.curve = "PRGAIN"})), InvalidArgument);
  json multi = configs().at("auc");
  multi["config"]["multi_label"] = true;
  EXPECT_THROW(io::keras::metric_from_json(multi, "m.keras"), Unsupported);
}

// ---------------------------------------------------------------- end to end: Keras' .keras files, evaluate
const std::map<std::string, Tensor>& e2e() {
  static const auto f = testing::load_keras_text(kDir + "e2e_expect.txt");
  return f;
}

void expect_keras_evaluate(const std::string& name, const std::vector<std::string>& logs_to_check) {
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  Tensor y = e2e().at(name + "/y");
  if (name == "e2e_classes") y = y.to(DType::i32);  // integer class ids
  const Logs logs = model->evaluate(e2e().at(name + "/x"), y, {.batch_size = 4});
  for (const std::string& key : logs_to_check) {
    const double want = e2e().at(name + "/log/" + key).data<float>()[0];
    EXPECT_NEAR(logs.get(key), want, 1e-4 * std::max(std::abs(want), 1e-3)) << name << " " << key;
  }
}

TEST(KerasMetricEndToEnd, HuberWithPrecisionRecallAucMaeEvaluatesAsKeras) {
  expect_keras_evaluate("e2e_binary", {"loss", "precision", "recall", "auc", "mae"});
}

TEST(KerasMetricEndToEnd, IgnoreClassLossWithTopKAndMeanIoUEvaluatesAsKeras) {
  expect_keras_evaluate("e2e_classes", {"loss", "sparse_top_k_categorical_accuracy", "mean_io_u", "accuracy"});
}

TEST(KerasMetricEndToEnd, CompileConfigIsReadWithItsOptions) {
  std::unique_ptr<Model> model = models::load_model(kDir + "e2e_classes.keras");
  ASSERT_EQ(model->losses().size(), 1u);
  EXPECT_EQ(model->losses()[0].ignore_class, 3);
  ASSERT_EQ(model->metrics().size(), 3u);
  EXPECT_EQ(model->metrics()[0].k, 2);
  EXPECT_EQ(model->metrics()[1].num_classes, 4);
  EXPECT_FALSE(model->metrics()[1].sparse_y_pred);
  EXPECT_EQ(model->metrics()[2].name, "accuracy");
}

}  // namespace
}  // namespace tk
