// Runs with TK_MEMORY_LIMIT=24MiB (set by CTest): an out-of-memory error leaves the process usable, and
// training continues with a batch size that the plan says fits.
#include <gtest/gtest.h>

#include <cmath>

#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

TEST(Budget, LimitComesFromTheEnvironment) { EXPECT_EQ(config::get_memory_info().limit, size_t{24} << 20); }

TEST(Budget, OutOfMemoryIsCaughtAndTrainingContinuesWithABatchThatFits) {
  Sequential model({layers::Input({256}), layers::Dense(512, "relu"), layers::Dense(512, "relu"), layers::Dense(10)});
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const int64_t big = 4096;
  Tensor x = Tensor::full({big, 256}, 0.01f);
  Tensor y(Shape{big}, DType::i32);
  const MemoryInfo before = config::get_memory_info();
  try {
    model.train_on_batch({x}, {y});
    FAIL() << "a batch of " << big << " should not fit in 24 MiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("program arena (train, batch 4096)"), std::string::npos) << e.what();
  }
  // Nothing of the failed program is left behind: only the optimizer state, created before the arena.
  EXPECT_EQ(config::get_memory_info().current, before.current + model.memory_plan(1).optimizer_state);
  // The plan names a batch that fits what is left; training with it succeeds. What is left: the budget
  // not yet reserved (free fragments inside reserved regions cannot hold a large arena), plus the
  // model's own weights and optimizer state, which the plan counts, less 2 MiB for the batch slices.
  const MemoryInfo now = config::get_memory_info();
  const MemoryPlan plan = model.memory_plan(1);
  const size_t available = now.limit - now.reserved + plan.weights + plan.optimizer_state - (size_t{2} << 20);
  const int64_t fits = model.largest_batch_that_fits(available);
  ASSERT_GT(fits, 0);
  ASSERT_LT(fits, big);
  const Logs& logs = model.train_on_batch({x.slice_rows(0, fits)}, {y.slice_rows(0, fits)});
  EXPECT_TRUE(std::isfinite(logs.get("loss")));
  EXPECT_LE(config::get_memory_info().peak, now.limit);
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

TEST(Budget, AutoBatchSizeAndAutoMicroBatchesTrainWithinTheBudget) {
  Sequential model({layers::Input({256}), layers::Dense(512, "relu"), layers::Dense(512, "relu"), layers::Dense(10)});
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  Tensor x = Tensor::full({4096, 256}, 0.01f);
  Tensor y(Shape{4096}, DType::i32);
  config::reset_peak_memory();
  History h = model.fit(x, y, {.batch_size = kAutoBatchSize, .epochs = 1, .verbose = 0, .auto_batch_cap = 4096});
  EXPECT_EQ(h.history["loss"].size(), 1u);
  EXPECT_LE(config::get_memory_info().peak, config::get_memory_info().limit);
  // A batch of 4096 does not fit (Budget.OutOfMemory... above), but micro-batches keep it.
  History h2 = model.fit(x, y, {.batch_size = 4096, .epochs = 1, .verbose = 0, .micro_batch_size = kAutoBatchSize});
  EXPECT_TRUE(std::isfinite(h2.history["loss"][0]));
  EXPECT_LE(config::get_memory_info().peak, config::get_memory_info().limit);
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

// A 40-layer MLP whose plain plan exceeds the 24 MiB budget trains under it: rematerialization is the
// automatic last resort, and its losses equal those of a run that fits by micro-batching.
TEST(Budget, DeepMlpTrainsUnderTheBudgetByRematerialization) {
  auto make = [] {
    utils::set_random_seed(9);
    std::vector<LayerPtr> l{layers::Input({64})};
    for (int i = 0; i < 40; ++i) l.push_back(layers::Dense(128, "relu"));
    l.push_back(layers::Dense(10));
    auto m = std::make_unique<Sequential>(l);
    m->compile(optimizers::SGD({.learning_rate = 0.01f}), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    return m;
  };
  const int64_t batch = 2048;
  Tensor x = Tensor::full({batch, 64}, 0.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 13) % 97) / 97.0f - 0.5f;
  Tensor y(Shape{batch}, DType::i32);
  for (int i = 0; i < batch; ++i) y.data<int32_t>()[i] = i % 10;
  std::vector<double> remat_losses, micro_losses;
  {
    auto m = make();
    m->rematerialization = Remat::off;
    const MemoryPlan plain = m->memory_plan(batch);
    m->rematerialization = Remat::automatic;
    const MemoryPlan chosen = m->memory_plan(batch);
    ASSERT_GT(plain.total, m->memory_available_for_training()) << "the plain plan must not fit for this test";
    ASSERT_TRUE(chosen.rematerialized);
    ASSERT_LE(chosen.total, m->memory_available_for_training()) << chosen.to_string();
    History h = m->fit(x, y, {.batch_size = batch, .epochs = 3, .verbose = 0, .shuffle = false});
    remat_losses = h.history["loss"];
  }
  {
    auto m = make();
    m->rematerialization = Remat::off;
    History h =
        m->fit(x, y, {.batch_size = batch, .epochs = 3, .verbose = 0, .shuffle = false, .micro_batch_size = 256});
    micro_losses = h.history["loss"];
  }
  ASSERT_EQ(remat_losses.size(), 3u);
  for (size_t e = 0; e < 3; ++e) EXPECT_NEAR(remat_losses[e], micro_losses[e], 1e-5 * std::abs(micro_losses[e])) << e;
  EXPECT_LE(config::get_memory_info().peak, config::get_memory_info().limit);
}

}  // namespace
}  // namespace tk
