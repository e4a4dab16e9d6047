// fit(x, y)'s batch order (nn::ArrayBatches): with shuffle, each epoch is a fresh permutation of every row, drawn from
// the seed alone. Keras 3 on the TensorFlow backend, once keras.utils.set_random_seed has run, replays one order every
// epoch (its tf.data permutation op is seeded when the pipeline is traced); on the tutorial CNN that costs ~1 point of
// test accuracy (docs/benchmarks.md). These tests pin trainkit's behaviour: reshuffled each epoch, reproducible.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "nn/training/array_batches.h"
#include "trainkit/core/tensor.h"

namespace tk {
namespace {

constexpr int64_t kRows = 50, kBatch = 8, kSteps = (kRows + kBatch - 1) / kBatch;

// The row numbers of `epochs` epochs, in the order the batches hand them out: (epochs, kRows).
std::vector<std::vector<int64_t>> epoch_orders(nn::ArrayBatches& source, int epochs) {
  std::vector<std::vector<int64_t>> orders;
  for (int e = 0; e < epochs; ++e) {
    source.begin_epoch(0);
    std::vector<int64_t> order;
    for (int64_t s = 0; s < source.steps(); ++s) {
      nn::Batch b;
      EXPECT_TRUE(source.next(0, b));
      EXPECT_EQ(b.n, std::min(kBatch, kRows - s * kBatch)) << "step " << s;
      order.insert(order.end(), b.rows, b.rows + b.n);
    }
    orders.push_back(order);
  }
  return orders;
}

struct Arrays {
  std::vector<Tensor> x{Tensor::zeros(Shape{kRows, 3})}, y{Tensor::zeros(Shape{kRows, 1})};
};

TEST(ArrayBatches, ShuffleDrawsANewPermutationEachEpoch) {
  Arrays a;
  nn::ArrayBatches source(a.x, &a.y, kBatch, kSteps, /*shuffle=*/true, /*seed=*/7);
  const auto orders = epoch_orders(source, 4);
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  for (size_t e = 0; e < orders.size(); ++e) {
    std::vector<int64_t> sorted = orders[e];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all) << "epoch " << e << " visits every row once";
    EXPECT_NE(orders[e], all) << "epoch " << e << " is shuffled";
    for (size_t f = 0; f < e; ++f) EXPECT_NE(orders[e], orders[f]) << "epochs " << f << " and " << e;
  }
}

TEST(ArrayBatches, TheSameSeedGivesTheSameEpochsAndAnotherSeedOthers) {
  Arrays a;
  nn::ArrayBatches first(a.x, &a.y, kBatch, kSteps, true, 7), again(a.x, &a.y, kBatch, kSteps, true, 7),
      other(a.x, &a.y, kBatch, kSteps, true, 8);
  const auto want = epoch_orders(first, 3);
  EXPECT_EQ(epoch_orders(again, 3), want);
  const auto got = epoch_orders(other, 3);
  for (size_t e = 0; e < want.size(); ++e) EXPECT_NE(got[e], want[e]) << "epoch " << e;
}

TEST(ArrayBatches, WithoutShuffleEveryEpochRunsInRowOrder) {
  Arrays a;
  nn::ArrayBatches source(a.x, &a.y, kBatch, kSteps, /*shuffle=*/false, 7);
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  for (const auto& order : epoch_orders(source, 2)) EXPECT_EQ(order, all);
}

TEST(ArrayBatches, AResumedSourceReplaysTheEpochsItHadNotRun) {
  Arrays a;
  nn::ArrayBatches first(a.x, &a.y, kBatch, kSteps, true, 7);
  const auto want = epoch_orders(first, 3);
  nn::ArrayBatches ran_one(a.x, &a.y, kBatch, kSteps, true, 7);
  epoch_orders(ran_one, 1);
  FitPosition p;
  ran_one.record(p, /*epoch_end=*/true);
  nn::ArrayBatches resumed(a.x, &a.y, kBatch, kSteps, true, /*seed=*/12345);  // the saved seed wins
  resumed.resume(p);
  const auto got = epoch_orders(resumed, 2);
  EXPECT_EQ(got[0], want[1]);
  EXPECT_EQ(got[1], want[2]);
}

}  // namespace
}  // namespace tk
