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

#include "graph/program.h"
#include "nn/compiler/programs.h"
#include "nn/training/fit_common.h"
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
    try {
      tk::nn::log_lag(tk::Device::cpu(), false, false);
    } catch (const tk::InvalidArgument& e) {  // what is wrong, the values allowed, and when it is read
      const std::string what = e.what();
      EXPECT_NE(what.find("TK_LOG_LAG='2'"), std::string::npos) << what;
      EXPECT_NE(what.find("0 ("), std::string::npos) << what;
      EXPECT_NE(what.find("1 ("), std::string::npos) << what;
      EXPECT_NE(what.find("when fit starts"), std::string::npos) << what;
    }
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

// Throws from a callback event; records every on_train_batch_end.
struct Thrower : Recorder {
  int64_t throw_at_begin = -1, throw_at_end = -1;
  void on_train_batch_begin(int64_t b, const tk::Logs& logs) override {
    Recorder::on_train_batch_begin(b, logs);
    if (b == throw_at_begin) throw tk::Error("a callback failed at the beginning of batch " + std::to_string(b));
  }
  void on_train_batch_end(int64_t b, const tk::Logs& logs) override {
    Recorder::on_train_batch_end(b, logs);
    if (b == throw_at_end) throw tk::Error("a callback failed at the end of batch " + std::to_string(b));
  }
};

std::shared_ptr<Thrower> fit_throwing(const char* lag, int64_t at_begin, int64_t at_end, bool dataset = false) {
  LagEnv env(lag);
  const Tensor x = tk::testing::uniform({160, 8}, 1), y = tk::testing::int_labels(160, 3, 2);
  auto m = make_model();
  auto t = std::make_shared<Thrower>();
  t->throw_at_begin = at_begin;
  t->throw_at_end = at_end;
  tk::FitOptions o;
  o.epochs = 1;
  o.batch_size = 32;
  o.verbose = 0;
  o.seed = 5;
  o.shuffle = false;
  o.callbacks = {t};
  if (dataset)
    EXPECT_THROW(m->fit(tk::data::Dataset::from_tensor_slices({x, y}).batch(32), o), tk::Error);
  else
    EXPECT_THROW(m->fit(x, y, o), tk::Error);
  return t;
}

// An exception from on_train_batch_begin(2): with lag 1 batch 1 trained but its logs were not read yet; it still gets
// its on_train_batch_end (the same logs as with lag 0) before the exception leaves fit.
TEST(LaggedLogs, AnExceptionDeliversTheTrainedBatchesFirst) {
  for (bool dataset : {false, true}) {
    const auto plain = fit_throwing("0", 2, -1, dataset), lagged = fit_throwing("1", 2, -1, dataset);
    ASSERT_EQ(plain->ends.size(), 2u) << dataset;
    ASSERT_EQ(lagged->ends.size(), 2u) << "batch 1 delivered before the exception propagates; dataset " << dataset;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(lagged->ends[i].first, plain->ends[i].first);
      EXPECT_EQ(lagged->ends[i].second, plain->ends[i].second) << i;
    }
  }
}

// An exception from on_train_batch_end(1): the callbacks are not called again (batch 2, already trained with lag 1,
// is not delivered), as with lag 0, where batch 2 never ran.
TEST(LaggedLogs, AnExceptionFromOnTrainBatchEndDeliversNothingMore) {
  const auto plain = fit_throwing("0", -1, 1), lagged = fit_throwing("1", -1, 1);
  EXPECT_EQ(plain->ends.size(), 2u);
  ASSERT_EQ(lagged->ends.size(), 2u);
  EXPECT_EQ(lagged->ends.back().first, 1);
}

// Seals with the stream the step's programs ran on, captured in add(): the Compiled may be evicted by a later
// ProgramCache::get (micro-batching's apply program) before end().
struct SealRecorder : tk::nn::LogStore {
  std::vector<unsigned char> buf = std::vector<unsigned char>(64);
  std::vector<void*> sealed;
  size_t capacity(int) const override { return buf.size(); }
  void grow(int, size_t bytes, size_t) override { buf.resize(std::max(buf.size(), bytes)); }
  const void* data(int) const override { return buf.data(); }
  void queue(int, tk::nn::Compiled& c, int value, size_t offset, size_t bytes) override {
    c.program->read_output(value, buf.data() + offset, bytes);
  }
  void seal(int, void* stream) override { sealed.push_back(stream); }
  void wait(int) override {}
};

std::unique_ptr<tk::nn::Compiled> scalar_program(int* stream) {
  static Tensor ta = Tensor::full({1}, 2.0f), tb = Tensor::full({1}, 3.0f);  // a program's variables outlive it
  tk::graph::Graph g;
  const int a = g.variable("a", ta), b = g.variable("b", tb);
  const int out = g.add(tk::graph::Op::Mul, {a, b});
  auto c = std::make_unique<tk::nn::Compiled>();
  c->program =
      std::make_unique<tk::graph::Program>(std::move(g), std::vector<int>{out}, std::vector<int>{}, tk::Device::cpu());
  c->program->set_stream(stream);
  c->program->run(tk::graph::ExecContext{});
  c->logs = {{"loss", out}};
  return c;
}

TEST(LaggedLogs, SealsWithTheStreamNotTheProgram) {
  int stream = 0;
  auto store = std::make_unique<SealRecorder>();
  SealRecorder* rec = store.get();
  tk::nn::LaggedLogs l(1, std::move(store));
  l.begin(0);
  auto c = scalar_program(&stream);
  l.add(*c, 4);
  c.reset();  // evicted (ProgramCache::get on out of memory) before the step ends
  l.end();
  ASSERT_EQ(rec->sealed.size(), 1u);
  EXPECT_EQ(rec->sealed[0], &stream);
  tk::nn::Accumulator acc;
  EXPECT_EQ(l.deliver(acc), 0);
  l.delivered();
  tk::Logs logs;
  acc.write(logs);
  EXPECT_EQ(logs.get("loss"), 6.0);
}

TEST(LaggedLogs, AnAbandonedStepIsSealedAndNeverDelivered) {
  int stream = 0;
  auto store = std::make_unique<SealRecorder>();
  SealRecorder* rec = store.get();
  auto l = std::make_unique<tk::nn::LaggedLogs>(1, std::move(store));
  auto c = scalar_program(&stream);
  l->begin(0);
  l->add(*c, 4);
  l->end();
  l->begin(1);
  l->add(*c, 4);  // the step throws here: end() never comes
  l->abandon_open();
  EXPECT_EQ(rec->sealed.size(), 2u) << "its copies are followed by an event the store waits for before freeing";
  EXPECT_TRUE(l->pending());
  tk::nn::Accumulator acc;
  EXPECT_EQ(l->deliver(acc), 0);
  l->delivered();
  EXPECT_FALSE(l->pending()) << "batch 1 was abandoned";
  l->begin(2);
  l->discard();
  EXPECT_FALSE(l->pending());
  EXPECT_EQ(rec->sealed.size(), 2u) << "nothing was queued for batch 2";
}

}  // namespace
