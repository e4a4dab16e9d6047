// Logs read one step late (nn/training/lagged_logs.h), checked on the CPU by forcing the lag a GPU gets
// (TK_LOG_LAG=1): callbacks receive the same logs for the same batches in the same order, and History, weights and
// iterations are the same as with lag 0 (arrays, micro-batches, a Dataset); stop_training takes effect one batch
// later, as documented; log_lag's rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "nn/training/lagged_logs.h"
#include "test_data.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;

struct LagEnv {
  explicit LagEnv(const char* v) { ::setenv("TK_LOG_LAG", v, 1); }
  ~LagEnv() { ::unsetenv("TK_LOG_LAG"); }
};

std::unique_ptr<tk::Sequential> make_model() {
  tk::utils::set_random_seed(11);
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{
      tk::layers::Input({8}), tk::layers::Dense(16, "relu"), tk::layers::Dropout(0.25f), tk::layers::Dense(3)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

// Every callback event, with the batch's logs at on_train_batch_end.
struct Recorder : tk::Callback {
  std::vector<std::string> events;
  std::vector<std::pair<int64_t, std::vector<std::pair<std::string, double>>>> ends;
  int64_t stop_at = -1;
  void on_train_batch_begin(int64_t b, const tk::Logs&) override { events.push_back("begin " + std::to_string(b)); }
  void on_train_batch_end(int64_t b, const tk::Logs& logs) override {
    events.push_back("end " + std::to_string(b));
    std::vector<std::pair<std::string, double>> v;
    for (const auto& [k, x] : logs.items()) v.emplace_back(k, x);
    ends.emplace_back(b, std::move(v));
    if (b == stop_at) model->stop_training = true;
  }
  void on_epoch_end(int e, const tk::Logs&) override { events.push_back("epoch " + std::to_string(e)); }
};

struct FitRun {
  std::shared_ptr<Recorder> rec = std::make_shared<Recorder>();
  tk::History history;
  std::vector<Tensor> weights;
  int64_t iterations = 0;
};

FitRun fit_with(const char* lag, int64_t micro = 0, int64_t stop_at = -1, bool dataset = false) {
  LagEnv env(lag);
  const Tensor x = tk::testing::uniform({200, 8}, 1), y = tk::testing::int_labels(200, 3, 2);
  auto m = make_model();
  FitRun r;
  r.rec->stop_at = stop_at;
  tk::FitOptions o;
  o.epochs = 2;
  o.batch_size = dataset ? 32 : 48;  // arrays: 160 training rows, 4 batches, the last one partial (another program)
  o.micro_batch_size = micro;
  o.verbose = 0;
  o.seed = 5;
  o.callbacks = {r.rec};
  if (dataset) {
    o.shuffle = false;
    r.history = m->fit(tk::data::Dataset::from_tensor_slices({x, y}).batch(32), o);
  } else {
    o.validation_split = 0.2f;
    r.history = m->fit(x, y, o);
  }
  r.weights = m->get_weights();
  r.iterations = m->optimizer()->iterations();
  return r;
}

void expect_same(const FitRun& a, const FitRun& b) {
  ASSERT_EQ(a.rec->ends.size(), b.rec->ends.size());
  for (size_t i = 0; i < a.rec->ends.size(); ++i) {
    EXPECT_EQ(a.rec->ends[i].first, b.rec->ends[i].first) << i;
    EXPECT_EQ(a.rec->ends[i].second, b.rec->ends[i].second) << "the logs of end #" << i;  // bit for bit
  }
  for (const auto& [key, values] : a.history.history)  // the input pipeline's wall-time shares differ run to run
    if (key.rfind("input_wait", 0) != 0) EXPECT_EQ(values, b.history.history.at(key)) << key;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i)
    for (int64_t k = 0; k < a.weights[i].numel(); ++k)
      ASSERT_EQ(a.weights[i].data<float>()[k], b.weights[i].data<float>()[k]) << "weight " << i;
  EXPECT_EQ(a.iterations, b.iterations);
}

TEST(LaggedLogs, CallbacksGetTheSameLogsInTheSameOrder) {
  const FitRun plain = fit_with("0"), lagged = fit_with("1");
  expect_same(plain, lagged);
  // Lag 0: begin k, end k, begin k+1, ... Lag 1: begin k+1 precedes end k (batch k+1 is queued before k's logs are
  // read), and every batch of an epoch ends before on_epoch_end.
  const auto& ev = lagged.rec->events;
  ASSERT_GE(ev.size(), 5u);
  EXPECT_EQ(ev[0], "begin 0");
  EXPECT_EQ(ev[1], "begin 1");
  EXPECT_EQ(ev[2], "end 0");
  EXPECT_EQ(ev[3], "begin 2");
  const auto epoch = std::find(ev.begin(), ev.end(), "epoch 0");
  ASSERT_NE(epoch, ev.end());
  EXPECT_EQ(*(epoch - 1), "end 3") << "160 training rows: batches 0..3, all delivered before on_epoch_end";
  EXPECT_EQ(plain.rec->events[1], "end 0");
}

TEST(LaggedLogs, MicroBatchesGiveTheSameLogs) { expect_same(fit_with("0", 8), fit_with("1", 8)); }

TEST(LaggedLogs, ADatasetGivesTheSameLogs) { expect_same(fit_with("0", 0, -1, true), fit_with("1", 0, -1, true)); }

// stop_training set in on_train_batch_end(k): lag 0 stops after batch k; lag 1 after batch k+1, which was already
// queued (trained, its on_train_batch_end called), then the epoch and fit end.
TEST(LaggedLogs, StopTrainingTakesEffectOneBatchLater) {
  const FitRun plain = fit_with("0", 0, 1), lagged = fit_with("1", 0, 1);
  ASSERT_EQ(plain.rec->ends.size(), 2u);
  EXPECT_EQ(plain.iterations, 2);
  ASSERT_EQ(lagged.rec->ends.size(), 3u);
  EXPECT_EQ(lagged.rec->ends.back().first, 2);
  EXPECT_EQ(lagged.iterations, 3);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(lagged.rec->ends[i].second, plain.rec->ends[i].second) << i;
  EXPECT_EQ(lagged.history.history.at("loss").size(), 1u) << "one epoch";
}

TEST(LaggedLogs, TheLagRule) {
  ::unsetenv("TK_LOG_LAG");
  EXPECT_EQ(tk::nn::log_lag(tk::Device::cpu(), false, false), 0);
  EXPECT_EQ(tk::nn::log_lag(tk::Device::cuda(0), false, false), 1);
  EXPECT_EQ(tk::nn::log_lag(tk::Device::cuda(0), true, false), 0) << "dynamic loss scaling";
  EXPECT_EQ(tk::nn::log_lag(tk::Device::cuda(0), false, true), 0) << "data parallel replicas";
  {
    LagEnv env("1");
    EXPECT_EQ(tk::nn::log_lag(tk::Device::cpu(), false, false), 1);
  }
  {
    LagEnv env("1");
    EXPECT_EQ(tk::nn::log_lag(tk::Device::cpu(), true, false), 0) << "never under loss scaling";
    EXPECT_EQ(tk::nn::log_lag(tk::Device::cpu(), false, true), 0) << "never for data parallel replicas";
  }
  {
    LagEnv env("0");
    EXPECT_EQ(tk::nn::log_lag(tk::Device::cuda(0), false, false), 0);
  }
  {
    LagEnv env("2");
    EXPECT_THROW(tk::nn::log_lag(tk::Device::cpu(), false, false), tk::InvalidArgument);
  }
}

TEST(LaggedLogs, DeliverBeforeQueuingMore) {
  tk::nn::LaggedLogs l(1, tk::nn::LaggedLogs::host_store());
  l.begin(0);
  l.end();
  EXPECT_FALSE(l.ready());
  l.begin(1);
  l.end();
  EXPECT_TRUE(l.ready());
  EXPECT_THROW(l.begin(2), tk::InvalidArgument) << "two pending at lag 1: the loop must deliver first";
}

}  // namespace
