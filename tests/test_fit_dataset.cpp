// fit / evaluate / predict over tk::data::Dataset: the same results as arrays, stall accounting in the
// logs, advice when input-bound, and clear errors for pipelines that do not match the model.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "trainkit/data/dataset.h"
#include "trainkit/trainkit.h"

namespace {

using tk::Tensor;
using tk::data::Dataset;
using tk::data::Element;

struct Data {
  Tensor x, y;
};

Data synthetic(int64_t n, uint64_t seed) {
  Data d{Tensor({n, 8}, tk::DType::f32), Tensor({n}, tk::DType::u8)};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int j = 0; j < 8; ++j) s += (d.x.data<float>()[i * 8 + j] = g(rng)) * (j % 2 ? 1.f : -0.5f);
    d.y.data<uint8_t>()[i] = s > 0 ? 1 : 0;
  }
  return d;
}

std::unique_ptr<tk::Sequential> model(uint64_t seed) {
  tk::utils::set_random_seed(seed);
  auto m = std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{tk::layers::Input({8}), tk::layers::Dense(16, "relu"), tk::layers::Dense(2)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

float max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t k = 0; k < a[i].numel(); ++k) m = std::max(m, std::abs(a[i].data<float>()[k] - b[i].data<float>()[k]));
  return m;
}

TEST(FitDataset, SameWeightsAsArraysWithoutShuffling) {
  Data d = synthetic(200, 1);
  auto a = model(5), b = model(5);
  tk::History ha = a->fit(d.x, d.y, {.batch_size = 32, .epochs = 3, .verbose = 0, .shuffle = false});
  tk::History hb = b->fit(Dataset::from_tensor_slices({d.x, d.y}).batch(32), {.epochs = 3, .verbose = 0});
  EXPECT_EQ(max_abs_diff(a->get_weights(), b->get_weights()), 0.0f);
  ASSERT_EQ(hb.history.at("loss").size(), 3u);
  for (int e = 0; e < 3; ++e) EXPECT_NEAR(ha.history.at("loss")[e], hb.history.at("loss")[e], 1e-6);
  ASSERT_TRUE(hb.history.count("input_wait_fraction"));
  EXPECT_GE(hb.history.at("input_wait_fraction")[2], 0.0);
  EXPECT_LE(hb.history.at("input_wait_fraction")[2], 1.0);

  // evaluate and predict agree with the array versions.
  Dataset test = Dataset::from_tensor_slices({d.x, d.y}).batch(50);
  tk::Logs la = a->evaluate(d.x, d.y, {.batch_size = 50}), lb = b->evaluate(test);
  EXPECT_NEAR(la.get("loss"), lb.get("loss"), 1e-6);
  EXPECT_NEAR(la.get("accuracy"), lb.get("accuracy"), 1e-9);
  Tensor pa = a->predict(d.x, 50);
  std::vector<Tensor> pb = b->predict(test);  // (x, y) elements: y ignored
  ASSERT_EQ(pb[0].shape(), pa.shape());
  EXPECT_LT(max_abs_diff({pa}, pb), 1e-6f);
}

TEST(FitDataset, TrainsWithAShuffledParallelPipelineAndValidation) {
  Data d = synthetic(1000, 2), v = synthetic(200, 3);
  auto m = model(7);
  Dataset train = Dataset::from_tensor_slices({d.x, d.y})
                      .shuffle(1000, 1)
                      .map([](Element e) { return e; }, {.num_parallel_calls = tk::data::AUTOTUNE})
                      .batch(32)
                      .prefetch(tk::data::AUTOTUNE);
  tk::History h = m->fit(
      train, {.epochs = 8, .verbose = 0, .validation_dataset = Dataset::from_tensor_slices({v.x, v.y}).batch(64)});
  EXPECT_GT(h.history.at("val_accuracy").back(), 0.85);
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front());
}

TEST(FitDataset, StepsPerEpochKeepsOnePassAcrossEpochsAndWarnsWhenItRunsOut) {
  Data d = synthetic(64, 4);
  auto m = model(1);
  tk::History h = m->fit(Dataset::from_tensor_slices({d.x, d.y}).batch(16).repeat(),
                         {.epochs = 3, .verbose = 0, .steps_per_epoch = 5});
  EXPECT_EQ(h.history.at("loss").size(), 3u);
  testing::internal::CaptureStdout();
  h = m->fit(Dataset::from_tensor_slices({d.x, d.y}).batch(16), {.epochs = 3, .verbose = 0, .steps_per_epoch = 3});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("Your input ran out of data"), std::string::npos) << out;
  EXPECT_EQ(h.history.at("loss").size(), 2u);  // 3 + 1 batches: the second epoch is cut short and training stops
}

TEST(FitDataset, InputBoundTrainingIsReportedWithAdvice) {
  Data d = synthetic(256, 5);
  auto m = model(2);
  // A sequential map that sleeps 2 ms per element: the step (microseconds) waits for input nearly always.
  Dataset slow = Dataset::from_tensor_slices({d.x, d.y})
                     .map([](Element e) {
                       std::this_thread::sleep_for(std::chrono::milliseconds(2));
                       return e;
                     })
                     .batch(32);
  testing::internal::CaptureStdout();
  tk::History h = m->fit(slow, {.epochs = 1, .verbose = 2});
  const std::string out = testing::internal::GetCapturedStdout();
  // Not timing assertions: a sleep never returns early, so every batch waits >= 64 ms (32 x 2 ms) whatever the
  // load, and the fraction stays above 0.2 unless a 2-unit Dense step on 32 rows takes over 256 ms.
  EXPECT_GT(h.history.at("input_wait_fraction")[0], 0.2);
  EXPECT_GT(h.history.at("input_wait_p50_ms")[0], 10.0);
  EXPECT_NE(out.find("highly input-bound"), std::string::npos) << out;
  EXPECT_NE(out.find("slowest stage: map"), std::string::npos) << out;
  EXPECT_NE(out.find("num_parallel_calls"), std::string::npos) << out;
}

TEST(FitDataset, MismatchedPipelinesGetClearErrors) {
  Data d = synthetic(64, 6);
  auto m = model(3);
  auto msg = [&](const Dataset& ds, tk::FitOptions o = {.verbose = 0}) {
    try {
      m->fit(ds, o);
    } catch (const tk::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg(Dataset::from_tensor_slices({d.x}).batch(8)).find("elements must be (x..., y...)"), std::string::npos);
  EXPECT_NE(msg(Dataset::from_tensor_slices({d.x, d.y})).find("add .batch(n)"), std::string::npos);
  EXPECT_NE(msg(Dataset::from_tensor_slices({d.x, d.y}).batch(8).repeat()).find("give steps_per_epoch"),
            std::string::npos);
  EXPECT_NE(msg(Dataset::from_tensor_slices({d.x, d.y}).batch(8), {.verbose = 0, .validation_split = 0.2f})
                .find("validation_split is not supported"),
            std::string::npos);
  EXPECT_NE(msg(Dataset::from_tensor_slices({Tensor::zeros({64, 5}), d.y}).batch(8)).find("expects shape"),
            std::string::npos);
}

}  // namespace
