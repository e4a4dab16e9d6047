// tk::isolated_fit: training in a child process brings back the weights and History; a child that crashes or
// runs out of memory is an exception here and the model is unchanged; the parent's memory does not grow.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <random>

#include "runtime/isolate.h"
#include "test_data.h"
#include "trainkit/nn/isolated_fit.h"
#include "trainkit/trainkit.h"

namespace {

using tk::testing::uniform;

tk::Tensor labels(const tk::Tensor& x) {  // learnable: the sign of the first feature
  std::vector<int32_t> v(static_cast<size_t>(x.dim(0)));
  for (int64_t i = 0; i < x.dim(0); ++i) v[static_cast<size_t>(i)] = x.data<float>()[i * x.dim(1)] > 0 ? 1 : 0;
  return tk::Tensor::from_vector<int32_t>(tk::Shape{x.dim(0)}, v);
}

std::unique_ptr<tk::Sequential> model() {
  tk::utils::set_random_seed(21);
  auto m = std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{tk::layers::Input({8}), tk::layers::Dense(16, "relu"), tk::layers::Dense(2)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

bool same(const std::vector<tk::Tensor>& a, const std::vector<tk::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  return a.size() == b.size();
}

struct Env {  // the tests run the CLI this build made
  Env() { ::setenv("TK_TRAINKIT", TK_CLI_PATH, 1); }
};

}  // namespace

TEST(IsolatedFit, TrainsInAChildAndBringsBackWeightsOptimizerStateAndHistory) {
  Env env;
  const tk::Tensor x = uniform({256, 8}, 1), y = labels(x);
  const tk::Tensor vx = uniform({64, 8}, 2), vy = labels(vx);
  auto m = model();
  const std::vector<tk::Tensor> before = m->get_weights();
  const tk::History h =
      tk::isolated_fit(*m, x, y, {.batch_size = 32, .epochs = 3, .validation_data = std::make_pair(vx, vy)});
  ASSERT_EQ(h.epoch, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(h.history.at("loss").size(), 3u);
  ASSERT_EQ(h.history.at("val_accuracy").size(), 3u);
  EXPECT_LT(h.history.at("loss")[2], h.history.at("loss")[0]);
  EXPECT_FALSE(same(m->get_weights(), before)) << "the trained weights came back";
  EXPECT_EQ(m->optimizer()->iterations(), 3 * 8) << "and the optimizer's state with them";
  // The weights that came back are the ones the child evaluated: same validation accuracy here.
  const tk::Logs val = m->evaluate(vx, vy, {.batch_size = 64});
  EXPECT_NEAR(val.get("accuracy"), h.history.at("val_accuracy")[2], 1e-6);
}

TEST(IsolatedFit, ACrashOrAnOutOfMemoryInTheChildIsAnExceptionAndTheModelIsUnchanged) {
  Env env;
  const tk::Tensor x = uniform({64, 8}, 3), y = labels(x);
  auto m = model();
  const std::vector<tk::Tensor> before = m->get_weights();
  ::setenv("TK_TEST_FAULT", "segfault", 1);
  try {
    tk::isolated_fit(*m, x, y);
    ADD_FAILURE() << "expected an exception";
  } catch (const tk::OutOfMemoryError& e) {
    ADD_FAILURE() << "a crash is not an out-of-memory: " << e.what();
  } catch (const tk::Error& e) {
    // The sanitizers report the fault and end the child their own way; the child's last lines say what it was.
    EXPECT_NE(std::string(e.what()).find(tk::testing::kAsan ? "TK_TEST_FAULT: segfault now" : "SIGSEGV"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("TK_TEST_FAULT");
  EXPECT_THROW(tk::isolated_fit(*m, x, y, {.memory_limit = "1KiB"}), tk::OutOfMemoryError);
  EXPECT_TRUE(same(m->get_weights(), before));
}

TEST(IsolatedFit, TheParentsMemoryDoesNotGrow) {
  if (tk::testing::kAsan) GTEST_SKIP() << "AddressSanitizer's quarantine keeps freed memory resident";
  Env env;
  const tk::Tensor x = uniform({128, 8}, 4), y = labels(x);
  auto m = model();
  tk::isolated_fit(*m, x, y);  // warm-up: first-use allocations (libzip, HDF5 tables, the helper path)
  const size_t rss = tk::runtime::resident_bytes();
  for (int i = 0; i < 10; ++i) tk::isolated_fit(*m, x, y);
  EXPECT_LT(tk::runtime::resident_bytes(), rss + (1u << 20)) << "10 isolated fits grew this process by 1 MiB or more";
}
