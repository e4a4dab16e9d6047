// evaluate and predict under MirroredStrategy divide the batches over the replicas (batch k on replica k % replicas,
// each on its own thread with its own programs on its own device) and give what one device gives: the logs within
// 1e-6 relative (each batch's loss and metrics in float, the replicas' row-weighted sums added in double in replica
// order instead of batch order), the predictions within 1e-5 of the largest output. Both are printed: the replicas
// run 1 kernel thread each where the one device runs 2 (TK_THREADS=2), and a GEMM on another thread count rounds
// differently (4.7e-7 of the largest output measured for batches of 100; batches of 64 came out bit-equal). Runs in its
// own process (CTest: TK_MEMORY_LIMIT=3GiB): the cpu is split into cpu:0..cpu:2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "distribute/replica_test_support.h"
#include "nn/distribute/strategy_state.h"
#include "test_data.h"
#include "trainkit/nn/distribute.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

constexpr double kLogTolerance = 1e-6;         // relative, of max(1, |one device's value|)
constexpr double kPredictionTolerance = 1e-5;  // of the largest |output|

using testing::split_cpu;
std::vector<Device> first_devices(int n) { return testing::first_cpus(n); }

std::unique_ptr<Model> mlp(uint64_t seed) {
  utils::set_random_seed(seed);
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({784}), layers::Dense(64, "relu"),
                                                              layers::Dense(32, "relu"), layers::Dense(10)});
  return m;
}

void compile(Model& m) {
  m.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
}

// The batches each replica ran since `before` (evaluate and predict count them).
std::vector<int64_t> ran_since(const distribute::MirroredStrategy& s, const std::vector<int64_t>& before) {
  std::vector<int64_t> now = s.state()->inference_batches;
  now.resize(static_cast<size_t>(s.num_replicas_in_sync()), 0);
  for (size_t r = 0; r < before.size() && r < now.size(); ++r) now[r] -= before[r];
  return now;
}

// Batch k of `batches` on replica k % replicas.
std::vector<int64_t> expected_split(int64_t batches, int replicas) {
  std::vector<int64_t> want(static_cast<size_t>(replicas), 0);
  for (int64_t k = 0; k < batches; ++k) ++want[static_cast<size_t>(k % replicas)];
  return want;
}

void expect_same_logs(const Logs& one, const Logs& many, const std::string& what) {
  ASSERT_EQ(one.items().size(), many.items().size()) << what;
  double worst = 0;
  for (const auto& [k, v] : one.items()) {
    ASSERT_TRUE(many.contains(k)) << what << ": " << k;
    EXPECT_NEAR(many.get(k), v, kLogTolerance * std::max(1.0, std::fabs(v))) << what << ": " << k;
    worst = std::max(worst, std::fabs(many.get(k) - v) / std::max(1.0, std::fabs(v)));
  }
  std::printf("%s: logs differ by %.3g at most (relative)\n", what.c_str(), worst);
}

// max |a - b| / max |a|, and whether every bit is equal.
double expect_same_outputs(const Tensor& one, const Tensor& many, const std::string& what) {
  EXPECT_EQ(one.shape(), many.shape()) << what;
  if (one.shape() != many.shape()) return 1.0;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < one.numel(); ++i) {
    diff = std::max(diff, double(std::fabs(one.data<float>()[i] - many.data<float>()[i])));
    scale = std::max(scale, double(std::fabs(one.data<float>()[i])));
  }
  const double rel = scale > 0 ? diff / scale : diff;
  EXPECT_LE(rel, kPredictionTolerance) << what;
  const bool bits = std::memcmp(one.raw(), many.raw(), one.nbytes()) == 0;
  std::printf("%s: predictions max|d|/max|y| = %.3g%s\n", what.c_str(), rel, bits ? " (bit-equal)" : "");
  return rel;
}

// Over arrays and over a Dataset, for row counts that leave a short last batch, fewer batches than replicas, and one
// batch: the logs and the predictions equal one device's, and each replica ran its batches (k % replicas). The
// replicated model was trained first (its replicas hold their own copies) and then given the single-device model's
// weights with set_weights: evaluate and predict must pass them to every replica.
TEST(MirroredEvaluate, LogsAndPredictionsEqualOneDeviceOnTwoAndThreeReplicas) {
  split_cpu();
  struct Case {
    int64_t rows, batch;
  };
  for (const int replicas : {2, 3}) {
    distribute::MirroredStrategy strategy(first_devices(replicas));
    std::unique_ptr<Model> one = mlp(7), many = mlp(8);
    compile(*one);
    {
      auto scope = strategy.scope();
      compile(*many);
    }
    const Tensor tx = testing::uniform({256, 784}, 3), ty = testing::int_labels(256, 10, 4);
    many->fit(tx, ty, {.batch_size = 64, .verbose = 0});  // the replicas now hold trained weights of their own
    one->fit(tx.slice_rows(0, 64), ty.slice_rows(0, 64), {.batch_size = 64, .verbose = 0});
    many->set_weights(one->get_weights());
    for (const Case c : {Case{1050, 100}, Case{150, 100}, Case{37, 64}, Case{300, 100}}) {
      const std::string what = std::to_string(replicas) + " replicas, " + std::to_string(c.rows) +
                               " rows in batches of " + std::to_string(c.batch);
      const int64_t batches = (c.rows + c.batch - 1) / c.batch;
      const Tensor x = testing::uniform({c.rows, 784}, 5), y = testing::int_labels(c.rows, 10, 6);
      const Logs want = one->evaluate(x, y, {.batch_size = c.batch, .verbose = 0});
      std::vector<int64_t> before = strategy.state()->inference_batches;
      const Logs got = many->evaluate(x, y, {.batch_size = c.batch, .verbose = 0});
      expect_same_logs(want, got, "evaluate, " + what);
      EXPECT_EQ(ran_since(strategy, before), expected_split(batches, replicas)) << "evaluate, " << what;

      const Tensor p_want = one->predict(x, c.batch);
      before = strategy.state()->inference_batches;
      const Tensor p_got = many->predict(x, c.batch);
      expect_same_outputs(p_want, p_got, "predict, " + what);
      EXPECT_EQ(ran_since(strategy, before), expected_split(batches, replicas)) << "predict, " << what;

      const data::Dataset xy = data::Dataset::from_tensor_slices({x, y}).batch(c.batch);
      before = strategy.state()->inference_batches;
      expect_same_logs(want, many->evaluate(xy, {.verbose = 0}), "evaluate (Dataset), " + what);
      EXPECT_EQ(ran_since(strategy, before), expected_split(batches, replicas)) << "evaluate (Dataset), " << what;
      before = strategy.state()->inference_batches;
      const std::vector<Tensor> p_ds = many->predict(data::Dataset::from_tensor_slices({x}).batch(c.batch));
      ASSERT_EQ(p_ds.size(), 1u);
      expect_same_outputs(p_want, p_ds[0], "predict (Dataset), " + what);
      EXPECT_EQ(ran_since(strategy, before), expected_split(batches, replicas)) << "predict (Dataset), " << what;
    }
    // steps: the first 3 batches only, on 3 (or 2) replicas
    const Tensor x = testing::uniform({500, 784}, 9), y = testing::int_labels(500, 10, 10);
    const std::vector<int64_t> before = strategy.state()->inference_batches;
    expect_same_logs(one->evaluate(x, y, {.batch_size = 100, .verbose = 0, .steps = 3}),
                     many->evaluate(x, y, {.batch_size = 100, .verbose = 0, .steps = 3}), "evaluate, 3 steps");
    EXPECT_EQ(ran_since(strategy, before), expected_split(3, replicas));
  }
}

// fit's validation pass is divided too, and its logs are one device's evaluation of the weights the epoch ended with.
TEST(MirroredEvaluate, FitsValidationIsDividedOverTheReplicas) {
  split_cpu();
  distribute::MirroredStrategy strategy(first_devices(3));
  std::unique_ptr<Model> many = mlp(7), one = mlp(8);
  {
    auto scope = strategy.scope();
    compile(*many);
  }
  compile(*one);
  const Tensor x = testing::uniform({320, 784}, 1), y = testing::int_labels(320, 10, 2);
  const Tensor vx = testing::uniform({250, 784}, 3), vy = testing::int_labels(250, 10, 4);
  const std::vector<int64_t> before = strategy.state()->inference_batches;
  // 5 training steps of 64 rows: the last step's rows (64) cover every replica; validation in batches of 64: 4
  const History h = many->fit(x, y,
                              {.batch_size = 64,
                               .epochs = 1,
                               .verbose = 0,
                               .validation_data = std::make_pair(std::vector<Tensor>{vx}, std::vector<Tensor>{vy})});
  EXPECT_EQ(ran_since(strategy, before), expected_split(4, 3));
  one->set_weights(many->get_weights());
  const Logs want = one->evaluate(vx, vy, {.batch_size = 64, .verbose = 0});
  ASSERT_EQ(h.history.count("val_loss"), 1u);
  EXPECT_NEAR(h.history.at("val_loss")[0], want.get("loss"), kLogTolerance * std::max(1.0, want.get("loss")));
  EXPECT_NEAR(h.history.at("val_accuracy")[0], want.get("accuracy"), kLogTolerance);

  // fit over a Dataset with a validation Dataset: 250 rows in batches of 100, on replicas 0, 1 and 2
  const std::vector<int64_t> before_ds = strategy.state()->inference_batches;
  const History hd = many->fit(
      data::Dataset::from_tensor_slices({x, y}).batch(64),
      {.epochs = 1, .verbose = 0, .validation_dataset = data::Dataset::from_tensor_slices({vx, vy}).batch(100)});
  EXPECT_EQ(ran_since(strategy, before_ds), expected_split(3, 3));
  one->set_weights(many->get_weights());
  const Logs want_ds = one->evaluate(vx, vy, {.batch_size = 100, .verbose = 0});
  ASSERT_EQ(hd.history.count("val_loss"), 1u);
  EXPECT_NEAR(hd.history.at("val_loss")[0], want_ds.get("loss"), kLogTolerance * std::max(1.0, want_ds.get("loss")));
}

// A model whose outputs the replicas write side by side: two outputs, each batch's rows at their own place.
TEST(MirroredEvaluate, PredictWithTwoOutputsWritesEveryRowOnce) {
  split_cpu();
  distribute::MirroredStrategy strategy(first_devices(2));
  auto build = [](uint64_t seed) {
    utils::set_random_seed(seed);
    KerasTensor in = tk::Input({16});
    KerasTensor h = layers::Dense(8, "relu")(in);
    return std::make_unique<Model>(std::vector<KerasTensor>{in},
                                   std::vector<KerasTensor>{layers::Dense(3)(h), layers::Dense(2)(h)});
  };
  std::unique_ptr<Model> one = build(1), many = build(2);
  auto compile2 = [](Model& m) {
    m.compile(optimizers::SGD(), {losses::MeanSquaredError(), losses::MeanSquaredError()});
  };
  compile2(*one);
  {
    auto scope = strategy.scope();
    compile2(*many);
  }
  const Tensor x = testing::uniform({53, 16}, 1);
  many->predict(x, 8);  // builds the model
  many->set_weights(one->get_weights());
  const std::vector<Tensor> want = one->predict(std::vector<Tensor>{x}, 8);
  const std::vector<Tensor> got = many->predict(std::vector<Tensor>{x}, 8);  // 7 batches, the last of 5 rows
  ASSERT_EQ(got.size(), 2u);
  expect_same_outputs(want[0], got[0], "two outputs, output 0");
  expect_same_outputs(want[1], got[1], "two outputs, output 1");
}

// A batch that fails on one replica's thread (a label out of range in batch 1, replica 1's first) ends evaluate with
// that error, naming the row; the other replicas stop after the batch they are running (how many replica 0 ran is
// printed: it depends on when the threads ran), and the model evaluates correctly afterwards.
TEST(MirroredEvaluate, AFailureOnOneReplicaEndsTheEvaluation) {
  split_cpu();
  distribute::MirroredStrategy strategy(first_devices(2));
  std::unique_ptr<Model> many = mlp(7), one = mlp(7);
  {
    auto scope = strategy.scope();
    compile(*many);
  }
  compile(*one);
  const int64_t rows = 20000, batch = 100;  // 200 batches, 100 per replica
  const Tensor x = testing::uniform({rows, 784}, 1);
  Tensor y = testing::int_labels(rows, 10, 2);
  const Logs want = one->evaluate(x, y, {.batch_size = batch, .verbose = 0});
  y.data<int32_t>()[batch + 3] = 99;
  const std::vector<int64_t> before = strategy.state()->inference_batches;
  try {
    many->evaluate(x, y, {.batch_size = batch, .verbose = 0});
    ADD_FAILURE() << "a bad label on replica 1 did not fail evaluate";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("label 99"), std::string::npos) << e.what();
  }
  const std::vector<int64_t> ran = ran_since(strategy, before);
  EXPECT_EQ(ran[1], 0) << "replica 1 failed on its first batch";
  std::printf("replica 0 ran %lld of its 100 batches before it stopped\n", static_cast<long long>(ran[0]));
  const Tensor y_good = testing::int_labels(rows, 10, 2);
  expect_same_logs(want, many->evaluate(x, y_good, {.batch_size = batch, .verbose = 0}), "after the failure");
}

}  // namespace
}  // namespace tk
