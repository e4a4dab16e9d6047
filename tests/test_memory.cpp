// Device memory: the allocator (best fit, coalescing, regions given back, budget, OOM report), the
// memory plan against the measured peak of a real training step, and memory coming back.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "runtime/device_memory.h"
#include "runtime/isolate.h"
#include "test_data.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
using runtime::DeviceMemory;

DeviceInfo fake_device(size_t total) { return DeviceInfo{Device::cpu(), "test device", total}; }

TEST(Allocator, BestFitCoalescesAndGivesRegionsBack) {
  DeviceMemory m(fake_device(64 << 20));
  void* a = m.allocate(1000, "a");
  void* b = m.allocate(3000, "b");
  void* c = m.allocate(1000, "c");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % runtime::kAllocationAlignment, 0u);
  MemoryInfo i = m.info();
  EXPECT_EQ(i.current, 1024u + 3072u + 1024u);
  EXPECT_EQ(i.allocations, 3);
  EXPECT_EQ(i.reserved, runtime::kRegionGranularity);
  m.free(b);                        // a hole of 3072 between a and c
  void* d = m.allocate(2000, "d");  // best fit: the 3072 hole, not the big tail
  EXPECT_EQ(d, b);
  m.free(d);
  m.free(a);
  i = m.info();
  EXPECT_GT(i.fragmentation, 0.0) << "free space split by c";
  m.free(c);  // everything free: the region goes back
  i = m.info();
  EXPECT_EQ(i.current, 0u);
  EXPECT_EQ(i.reserved, 0u);
  EXPECT_EQ(i.allocations, 0);
  EXPECT_GE(i.peak, 1024u + 3072u + 1024u);
}

TEST(Allocator, OverBudgetThrowsAReportAndStaysUsable) {
  DeviceMemory m(fake_device(1 << 30));
  m.set_limit(4 << 20, "limit");
  void* w = m.allocate(3 << 20, "dense/kernel");
  try {
    m.allocate(2 << 20, "sequential: train program arena, batch 4096");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string r = e.what();
    for (const char* part :
         {"OOM when allocating 2.00 MiB", "train program arena, batch 4096", "budget 4.00 MiB", "in use 3.00 MiB",
          "largest live allocations", "dense/kernel", "what to do", "smaller batch"})
      EXPECT_NE(r.find(part), std::string::npos) << "missing '" << part << "' in:\n" << r;
  }
  void* small = m.allocate(512 << 10, "fits");  // still usable
  EXPECT_NE(small, nullptr);
  m.free(small);
  m.free(w);
  EXPECT_EQ(m.info().current, 0u);
}

TEST(Allocator, WithoutGrowthTheWholeBudgetIsReservedUpFront) {
  DeviceMemory m(fake_device(1 << 30));
  m.set_limit(8 << 20, "limit");
  m.set_growth(false);
  void* p = m.allocate(1000, "x");
  EXPECT_EQ(m.info().reserved, size_t{8} << 20);
  m.free(p);
  EXPECT_EQ(m.info().reserved, size_t{8} << 20) << "reserved memory stays when growth is off";
}

TEST(MemoryConfig, ParsesByteSizesAndRejectsLateChanges) {
  EXPECT_EQ(config::parse_bytes("1.5GiB"), size_t{3} << 29);
  EXPECT_EQ(config::parse_bytes("512MB"), size_t{512000000});
  EXPECT_EQ(config::parse_bytes("4096"), size_t{4096});
  EXPECT_THROW(config::parse_bytes("lots"), InvalidArgument);
  EXPECT_THROW(config::parse_bytes("3 parsecs"), InvalidArgument);
  Tensor in_use = Tensor::zeros({4});  // the cpu device is now in use
  try {
    config::set_memory_limit(Device::cpu(), 1 << 30);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
  EXPECT_THROW(config::set_memory_fraction(Device::cpu(), 0.5), InvalidArgument);
  // Counting cpu devices only: a GPU machine lists cuda devices too.
  auto cpus = [] {
    size_t n = 0;
    for (const DeviceInfo& d : config::list_devices()) n += d.device.kind == DeviceKind::cpu ? 1 : 0;
    return n;
  };
  EXPECT_EQ(cpus(), 1u);
  if (config::no_cuda_device_reason().empty()) GTEST_SKIP() << "a CUDA device is present: cuda:0 exists";
  EXPECT_THROW(config::set_visible_devices({Device::cuda(0)}), Unsupported);
  config::set_visible_devices({Device::cpu()});
  EXPECT_EQ(cpus(), 1u);
  EXPECT_GT(config::get_memory_info().total, size_t{0});
}

// ---------------------------------------------------------------- plan vs measured
struct PlanCase {
  std::string name;
  std::function<std::unique_ptr<Model>()> make;
  Shape x_sample;
  int64_t batch;
};

std::unique_ptr<Model> mlp(std::vector<int64_t> units, bool freeze_first = false) {
  std::vector<LayerPtr> l{layers::Input({64})};
  for (int64_t u : units) l.push_back(layers::Dense(u, "relu"));
  l.push_back(layers::Dense(10));
  auto m = std::make_unique<Sequential>(l);
  if (freeze_first) l[1]->trainable = false;
  return m;
}

// A model made under a dtype policy (the global policy goes back to float32).
std::unique_ptr<Model> under(const char* policy, const std::function<std::unique_ptr<Model>()>& make) {
  mixed_precision::set_global_policy(policy);
  std::unique_ptr<Model> m = make();
  mixed_precision::set_global_policy("float32");
  return m;
}

using tk::testing::kAsan;  // no RSS bound under AddressSanitizer (its shadow memory is resident too)

int64_t resident_bytes() { return static_cast<int64_t>(tk::runtime::resident_bytes()); }  // VmRSS

class PlanVsMeasured : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanVsMeasured, PlannedTotalMatchesTheMeasuredPeakOfATrainingStep) {
  const PlanCase& c = GetParam();
  std::vector<int64_t> xs{c.batch};
  xs.insert(xs.end(), c.x_sample.dims().begin(), c.x_sample.dims().end());
  Tensor x = Tensor::full(Shape(xs), 0.5f);
  Tensor y(Shape{c.batch}, DType::i32);
  for (int64_t i = 0; i < c.batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  const size_t baseline = config::get_memory_info().current;
  config::reset_peak_memory();
  const int64_t rss_before = resident_bytes();
  {
    std::unique_ptr<Model> model = c.make();
    model->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    model->train_on_batch({x}, {y});
    const size_t measured = config::get_memory_info().peak - baseline;
    const MemoryPlan plan = model->memory_plan(c.batch);
    std::printf("[ memory ] %-22s batch %4lld: planned %10zu bytes, measured %10zu bytes\n", c.name.c_str(),
                static_cast<long long>(c.batch), plan.total, measured);
    // docs/memory.md: "they agree to the byte".
    EXPECT_EQ(measured, plan.total) << plan.to_string();
    // And nothing big outside the allocator: the process grew by at most the plan plus a fixed allowance
    // (thread stacks, oneDNN's JIT code, the libraries' first-use buffers), so an unplanned buffer the size
    // of an activation or a weight (megabytes in tutorial_cnn) cannot hide from the count above.
    const int64_t rss_growth = resident_bytes() - rss_before;
    std::printf("[ memory ] %-22s resident growth %10lld bytes\n", c.name.c_str(), static_cast<long long>(rss_growth));
    if (!kAsan) EXPECT_LE(rss_growth, static_cast<int64_t>(plan.total) + (int64_t{24} << 20));
    EXPECT_LT(plan.arena, plan.unshared) << "the planner should reuse memory";
  }
  EXPECT_EQ(config::get_memory_info().current, baseline) << "destroying the model returns all of its memory";
}

INSTANTIATE_TEST_SUITE_P(
    Models, PlanVsMeasured,
    ::testing::Values(
        PlanCase{"mlp_small", [] { return mlp({32}); }, Shape{64}, 16},
        PlanCase{"mlp_256_128",
                 [] {
                   return mlp({256, 128});
                 },
                 Shape{64}, 256},
        PlanCase{"deep_mlp_12", [] { return mlp(std::vector<int64_t>(12, 96)); }, Shape{64}, 64},
        PlanCase{"mlp_frozen_first",
                 [] {
                   return mlp({256, 128}, true);
                 },
                 Shape{64}, 128},
        PlanCase{"tutorial_cnn", [] { return std::unique_ptr<Model>(models::tutorial_cnn()); }, Shape{28, 28}, 16},
        PlanCase{"small_cnn_bn",
                 [] {
                   using namespace layers;
                   return std::unique_ptr<Model>(std::make_unique<Sequential>(
                       std::vector<LayerPtr>{layers::Input({12, 12, 3}), Conv2D(8, 3, "relu"), BatchNormalization(),
                                             MaxPooling2D(2), Flatten(), Dense(10)}));
                 },
                 Shape{12, 12, 3}, 32},
        // The convolution family (issue 31): oneDNN's grouped convolutions' workspace, Conv2DTranspose's.
        PlanCase{"conv_family",
                 [] {
                   using namespace layers;
                   return std::unique_ptr<Model>(std::make_unique<Sequential>(std::vector<LayerPtr>{
                       layers::Input({12, 12, 8}), DepthwiseConv2D(3, "relu", {.padding = "same"}),
                       Conv2D(8, 3, "relu", {.groups = 4}), SeparableConv2D(8, 3, "relu", {.depth_multiplier = 2}),
                       Conv2DTranspose(4, 3, "relu", {.strides = 2}), GlobalAveragePooling2D(), Dense(10)}));
                 },
                 Shape{12, 12, 8}, 32},
        // Under each mixed policy: 16-bit activations, the weights' 16-bit copies, the 16-bit kernels'
        // workspace and (float16) the loss-scale state and the gradients kept for its finite check.
        PlanCase{"mlp_256_128_bf16", [] { return under("mixed_bfloat16", [] {
                                            return mlp({256, 128});
                                          }); }, Shape{64},
                 256},
        PlanCase{"mlp_256_128_f16", [] { return under("mixed_float16", [] {
                                           return mlp({256, 128});
                                         }); }, Shape{64},
                 256},
        PlanCase{"tutorial_cnn_bf16",
                 [] { return under("mixed_bfloat16", [] { return std::unique_ptr<Model>(models::tutorial_cnn()); }); },
                 Shape{28, 28}, 16},
        PlanCase{"tutorial_cnn_f16",
                 [] { return under("mixed_float16", [] { return std::unique_ptr<Model>(models::tutorial_cnn()); }); },
                 Shape{28, 28}, 16},
        PlanCase{"small_cnn_bn_bf16",
                 [] {
                   using namespace layers;
                   return under("mixed_bfloat16", [] {
                     return std::unique_ptr<Model>(std::make_unique<Sequential>(
                         std::vector<LayerPtr>{layers::Input({12, 12, 3}), Conv2D(8, 3, "relu"), BatchNormalization(),
                                               MaxPooling2D(2), Flatten(), Dense(10)}));
                   });
                 },
                 Shape{12, 12, 3}, 32}),
    [](const auto& info) { return info.param.name; });

TEST(MemoryPlan, FrozenLayersHaveNoGradientsAndNoOptimizerState) {
  auto trainable = mlp({256, 128});
  auto frozen = mlp({256, 128}, true);
  for (Model* m : {trainable.get(), frozen.get()})
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const MemoryPlan a = trainable->memory_plan(64), b = frozen->memory_plan(64);
  const size_t first_layer_kernel = 64 * 256 * 4, first_layer_bias = 256 * 4;
  EXPECT_EQ(a.optimizer_state - b.optimizer_state, 2 * (first_layer_kernel + 1024));  // Adam: m and v, 256-aligned
  EXPECT_EQ(a.gradients - b.gradients, first_layer_kernel + first_layer_bias);
  EXPECT_EQ(b.layers[1].optimizer_state, 0u);
  EXPECT_LT(b.total, a.total);
}

TEST(MemoryPlan, LargestBatchThatFitsIsMonotoneAndTight) {
  auto m = mlp({256, 128});
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const size_t budget = m->memory_plan(1000).total;
  const int64_t best = m->largest_batch_that_fits(budget);
  EXPECT_GE(best, 1000);
  EXPECT_LE(m->memory_plan(best).total, budget);
  EXPECT_GT(m->memory_plan(best + 1).total, budget);
  EXPECT_EQ(m->largest_batch_that_fits(100), 0) << "nothing fits in 100 bytes";
}

TEST(MemoryRelease, TwoHundredModelsBuiltTrainedAndDestroyedLeaveNothingBehind) {
  Tensor x = Tensor::full({32, 64}, 0.1f);
  Tensor y(Shape{32}, DType::i32);
  const MemoryInfo before = config::get_memory_info();
  for (int i = 0; i < 200; ++i) {
    {
      auto m = mlp({64 + i % 7});
      m->compile(optimizers::SGD(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
      m->train_on_batch({x}, {y});
      ASSERT_GT(config::get_memory_info().current, before.current);
    }
    clear_session();
    const MemoryInfo after = config::get_memory_info();
    ASSERT_EQ(after.current, before.current) << "model " << i;
    ASSERT_EQ(after.reserved, before.reserved) << "model " << i;
  }
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

// Gradient accumulation over micro-batches gives the update of the whole batch (up to float rounding).
class MicroBatching : public ::testing::TestWithParam<std::string> {};

TEST_P(MicroBatching, SameUpdatesAsTheWholeBatch) {
  Tensor x = Tensor::zeros({256, 20});
  Tensor y(Shape{256}, DType::i32);
  uint32_t state = 7;
  for (int64_t i = 0; i < x.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    x.data<float>()[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  for (int i = 0; i < 256; ++i) y.data<int32_t>()[i] = (i * 7) % 10;
  std::vector<std::vector<Tensor>> results;
  for (int64_t micro : {int64_t{0}, int64_t{16}, int64_t{24}}) {  // 24: micro-batches of 24, 24, 16
    utils::set_random_seed(3);
    Sequential m({layers::Input({20}), layers::Dense(32, "tanh"), layers::Dense(10)});
    m.compile(optimizers::get(GetParam(), GetParam() == "sgd" ? 0.1f : 0.01f),
              losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    History h = m.fit(x, y, {.batch_size = 64, .epochs = 3, .verbose = 0, .shuffle = false, .micro_batch_size = micro});
    results.push_back(m.get_weights());
    ASSERT_EQ(h.history["loss"].size(), 3u);
  }
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t i = 0; i < results[0].size(); ++i)
      for (int64_t k = 0; k < results[0][i].numel(); ++k)
        ASSERT_NEAR(results[r][i].data<float>()[k], results[0][i].data<float>()[k], 2e-5)
            << GetParam() << " micro run " << r << " weight " << i << " element " << k;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, MicroBatching, ::testing::Values("sgd", "adam", "rmsprop"));

TEST(MicroBatching, NeedsLessMemoryThanTheWholeBatch) {
  auto whole = mlp({512, 512});
  whole->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const size_t before = config::get_memory_info().current;
  Tensor x = Tensor::full({1024, 64}, 0.1f);
  Tensor y(Shape{1024}, DType::i32);
  config::reset_peak_memory();
  whole->fit(x, y, {.batch_size = 1024, .epochs = 1, .verbose = 0, .micro_batch_size = 128});
  const size_t micro_peak = config::get_memory_info().peak - before;
  EXPECT_LT(micro_peak, whole->memory_plan(1024).total) << "micro-batches of 128 must need less than a batch of 1024";
  EXPECT_GE(micro_peak, whole->memory_plan(128).total) << "at least a micro-batch step";
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

std::unique_ptr<Sequential> deep_mlp(int depth, int64_t width) {
  std::vector<LayerPtr> l{layers::Input({32})};
  for (int i = 0; i < depth; ++i) l.push_back(layers::Dense(width, "tanh"));
  l.push_back(layers::Dense(10));
  return std::make_unique<Sequential>(l);
}

TEST(Rematerialization, SameLossesLessArenaAndTheExtraComputeIsReported) {
  Tensor x = Tensor::full({256, 32}, 0.3f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 37) % 101) / 101.0f - 0.5f;
  Tensor y(Shape{256}, DType::i32);
  for (int i = 0; i < 256; ++i) y.data<int32_t>()[i] = i % 10;
  std::vector<std::vector<double>> losses(2);
  std::vector<MemoryPlan> plans;
  for (int r = 0; r < 2; ++r) {
    utils::set_random_seed(5);
    auto m = deep_mlp(40, 64);
    m->rematerialization = r == 0 ? Remat::off : Remat::on;
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    plans.push_back(m->memory_plan(256));
    for (int s = 0; s < 5; ++s) losses[r].push_back(m->train_on_batch({x}, {y}).get("loss"));
  }
  for (int s = 0; s < 5; ++s)
    EXPECT_EQ(losses[0][s], losses[1][s]) << "step " << s << ": recomputation changes nothing";
  EXPECT_FALSE(plans[0].rematerialized);
  EXPECT_TRUE(plans[1].rematerialized);
  EXPECT_LT(plans[1].arena * 2, plans[0].arena) << plans[0].to_string() << plans[1].to_string();
  EXPECT_GT(plans[1].recomputed_ops, 40);
  EXPECT_GT(plans[1].recompute_flops, 0.0);
  EXPECT_LT(plans[1].recompute_flops, 0.5 * plans[1].step_flops) << "about one extra forward pass at most";
  EXPECT_NE(plans[1].to_string().find("rematerialized"), std::string::npos);
}

}  // namespace
}  // namespace tk
