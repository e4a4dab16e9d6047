// One arena per model: the train, eval, predict and partial-batch programs share it (programs.cpp), so a
// validation set, a last partial batch or a predict call cost no memory beyond the largest program's plan.
#include <gtest/gtest.h>

#include <random>

#include "test_data.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace {

using tk::testing::uniform;
tk::Tensor labels(int64_t n, uint32_t seed) { return tk::testing::int_labels(n, 10, seed); }

std::unique_ptr<tk::Sequential> model() {
  tk::utils::set_random_seed(11);
  auto m = std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{tk::layers::Input({64}), tk::layers::Dense(128, "relu"), tk::layers::Dense(10)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

size_t in_use() { return tk::config::get_memory_info().current; }

}  // namespace

TEST(ArenaSharing, EvalPredictAndPartialBatchProgramsAddNoMemory) {
  // Data first: it is counted too, and must not move the comparison.
  const tk::Tensor x96 = uniform({96, 64}, 1), y96 = labels(96, 2);
  const tk::Tensor x100 = uniform({100, 64}, 3), y100 = labels(100, 4);
  const tk::Tensor vx = uniform({50, 64}, 5), vy = labels(50, 6);

  // Only the full-batch training program: 96 = 3 x 32.
  size_t plain = 0;
  {
    auto m = model();
    const size_t before = in_use();
    m->fit(x96, y96, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
    plain = in_use() - before;
    EXPECT_GT(plain, 0u);
    EXPECT_LE(plain, m->memory_plan(32).total) << "the model holds more than its plan";
  }
  // The same model with a partial last batch (100 = 3 x 32 + 4), validation batches of 32 and 18, evaluate
  // and predict with their own batch sizes: five more programs, the same bytes.
  {
    auto m = model();
    const size_t before = in_use();
    m->fit(x100, y100,
           {.batch_size = 32,
            .epochs = 2,
            .verbose = 0,
            .validation_data = std::make_pair(std::vector<tk::Tensor>{vx}, std::vector<tk::Tensor>{vy})});
    EXPECT_EQ(in_use() - before, plain) << "validation and partial-batch programs took memory of their own";
    m->evaluate(vx, vy, {.batch_size = 16});
    { const tk::Tensor p = m->predict(vx, 7); }  // the predictions themselves are freed at the brace
    EXPECT_EQ(in_use() - before, plain) << "evaluate/predict programs took memory of their own";
  }
}
