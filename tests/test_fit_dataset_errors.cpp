// fit / evaluate over a tk::data::Dataset when things go wrong or are cut short: a map that throws in the
// second epoch propagates out of fit, leaves no pipeline thread behind, and the model fits again; labels out
// of range through a pipeline are an error naming the label; validation_steps, EvaluateOptions.steps,
// stop_training and callbacks see the Dataset's steps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "trainkit/data/dataset.h"
#include "trainkit/trainkit.h"

namespace {

using tk::Tensor;
using tk::data::Dataset;
using tk::data::Element;

int threads_in_process() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// The thread count once it has come down to `want`, or after 2 s: a thread that has been joined can still be
// counted for a moment (OpenMP's pool threads of a finished thread end on their own, and the CI machine's two cores
// are busy with another test). A pipeline thread left behind stays, and fails the check.
int threads_settled(int want) {
  int n = threads_in_process();
  for (int i = 0; i < 200 && n > want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    n = threads_in_process();
  }
  return n;
}

struct Data {
  Tensor x, y;
};

Data synthetic(int64_t n, int classes) {
  Data d{Tensor({n, 8}, tk::DType::f32), Tensor({n}, tk::DType::i32)};
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (int64_t i = 0; i < n * 8; ++i) d.x.data<float>()[i] = g(rng);
  for (int64_t i = 0; i < n; ++i) d.y.data<int32_t>()[i] = static_cast<int32_t>(i % classes);
  return d;
}

std::unique_ptr<tk::Sequential> model() {
  tk::utils::set_random_seed(4);
  auto m = std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{tk::layers::Input({8}), tk::layers::Dense(16, "relu"), tk::layers::Dense(3)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

TEST(FitDatasetErrors, AMapThatThrowsInEpochTwoPropagatesLeavesNoThreadAndTheModelFitsAgain) {
  const Data d = synthetic(128, 3);
  auto m = model();
  m->fit(Dataset::from_tensor_slices({d.x, d.y}).batch(16), {.epochs = 1, .verbose = 0});  // threads of the runtime
  const int threads_before = threads_in_process();
  auto seen = std::make_shared<std::atomic<int>>(0);
  const Dataset failing = Dataset::from_tensor_slices({d.x, d.y})
                              .map(
                                  [seen](Element e) {
                                    if (seen->fetch_add(1) == 128 + 37) throw std::runtime_error("bad record 37");
                                    return e;
                                  },
                                  {.num_parallel_calls = 2})
                              .batch(16)
                              .prefetch(tk::data::AUTOTUNE);
  try {
    m->fit(failing, {.epochs = 3, .verbose = 0});
    FAIL() << "fit returned although the map threw in epoch 2";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("bad record 37"), std::string::npos) << e.what();
  }
  EXPECT_GE(seen->load(), 128 + 38);
  EXPECT_LT(seen->load(), 3 * 128) << "the third epoch ran";
  EXPECT_EQ(threads_settled(threads_before), threads_before) << "pipeline threads left behind";
  const tk::History h = m->fit(Dataset::from_tensor_slices({d.x, d.y}).batch(16), {.epochs = 2, .verbose = 0});
  ASSERT_EQ(h.history.at("loss").size(), 2u);
  EXPECT_TRUE(std::isfinite(h.history.at("loss")[1]));
  EXPECT_EQ(threads_settled(threads_before), threads_before);
}

TEST(FitDatasetErrors, LabelsOutOfRangeThroughAPipelineNameTheLabel) {
  const Data d = synthetic(64, 5);  // labels 0..4 for a 3-unit head
  auto m = model();
  try {
    m->fit(Dataset::from_tensor_slices({d.x, d.y}).shuffle(64, 1).batch(16).prefetch(2), {.epochs = 1, .verbose = 0});
    FAIL() << "labels 3 and 4 accepted by a 3-class head";
  } catch (const tk::Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("label 3") != std::string::npos || what.find("label 4") != std::string::npos) << what;
    EXPECT_NE(what.find('3'), std::string::npos) << what;
  }
  const Data ok = synthetic(64, 3);
  EXPECT_NO_THROW(m->fit(Dataset::from_tensor_slices({ok.x, ok.y}).batch(16), {.epochs = 1, .verbose = 0}));
}

struct Counter : tk::Callback {
  int epochs = 0;
  int64_t batches = 0;
  std::vector<int64_t> batch_ids;
  int stop_after_epoch = -1;
  void on_epoch_end(int epoch, const tk::Logs&) override {
    ++epochs;
    if (epoch == stop_after_epoch) model->stop_training = true;
  }
  void on_train_batch_end(int64_t batch, const tk::Logs&) override {
    ++batches;
    batch_ids.push_back(batch);
  }
};

TEST(FitDatasetErrors, StepsCallbacksAndStopTrainingThroughADataset) {
  const Data d = synthetic(160, 3);
  auto m = model();
  const Dataset train = Dataset::from_tensor_slices({d.x, d.y}).batch(16);  // 10 batches
  const Dataset val = Dataset::from_tensor_slices({d.x, d.y}).batch(32);    // 5 batches

  // callbacks see every batch of every epoch; stop_training ends fit after the epoch it is set in
  auto c = std::make_shared<Counter>();
  c->stop_after_epoch = 1;
  tk::History h = m->fit(train, {.epochs = 5, .verbose = 0, .callbacks = {c}});
  EXPECT_EQ(c->epochs, 2);
  EXPECT_EQ(c->batches, 20);
  ASSERT_EQ(c->batch_ids.size(), 20u);
  EXPECT_EQ(c->batch_ids[9], 9);
  EXPECT_EQ(c->batch_ids[10], 0) << "batch numbers restart each epoch";
  EXPECT_EQ(h.history.at("loss").size(), 2u);

  // validation_steps: only the first 2 of 5 validation batches; equal to evaluating those 64 rows
  m->stop_training = false;
  h = m->fit(train, {.epochs = 1, .verbose = 0, .validation_steps = 2, .validation_dataset = val});
  const tk::Logs first64 = m->evaluate(d.x.slice_rows(0, 64), d.y.slice_rows(0, 64), {.batch_size = 32});
  EXPECT_NEAR(h.history.at("val_loss")[0], first64.get("loss"), 1e-6);
  const tk::Logs all = m->evaluate(val);
  EXPECT_GT(std::abs(all.get("loss") - first64.get("loss")), 1e-6) << "the test cannot tell 2 batches from 5";

  // EvaluateOptions.steps through a Dataset
  EXPECT_NEAR(m->evaluate(val, {.steps = 2}).get("loss"), first64.get("loss"), 1e-6);
  EXPECT_NEAR(m->evaluate(val, {.steps = 0}).get("loss"), all.get("loss"), 1e-6);
}

}  // namespace
