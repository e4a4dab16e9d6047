// Saving a model trained on cuda:0 (issue 36; GPU machines only, skipped with the reason elsewhere;
// tools/gpu_check.sh runs them): the optimizer slots live in the GPU's memory and are written through one staging
// buffer in page-locked host memory (io::StagingBuffer, pinned by the CUDA backend through graph::Backend::pin_host),
// so a save raises the cpu's peak by exactly the plan's file-staging line and the GPU's by nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cuda_test_support.h"
#include "io/file_staging.h"
#include "trainkit/io/training_state_file.h"
#include "trainkit/trainkit.h"

namespace {
namespace fs = std::filesystem;
using tk::Tensor;
namespace layers = tk::layers;

// A staging buffer for a GPU's tensor is page-locked while it lives, and charged to the cpu's budget.
TEST(CudaSave, StagingBuffersForTheGpuArePinnedAndCharged) {
  SKIP_WITHOUT_GPU();
  const size_t before = tk::config::get_memory_info(tk::Device::cpu()).current;
  {
    tk::io::StagingBuffer b(size_t{1} << 20, tk::Device::cuda(0), "m.keras", "dense/kernel");
    EXPECT_TRUE(b.pinned());
    EXPECT_EQ(tk::config::get_memory_info(tk::Device::cpu()).current - before, size_t{1} << 20);
  }
  EXPECT_EQ(tk::config::get_memory_info(tk::Device::cpu()).current, before);
}

// Device weights saved through pinned staging: the GPU's peak over training and the saves is the plan's total, the
// cpu's rises by the plan's file-staging line (the largest slot, at most 4 MiB), and the files hold the trained values.
TEST(CudaSave, DeviceSlotsSaveThroughPinnedStagingWithinThePlan) {
  SKIP_WITHOUT_GPU();
  const tk::Device gpu = tk::Device::cuda(0), cpu = tk::Device::cpu();
  const fs::path dir = fs::path(::testing::TempDir()) / ("tk_cuda_save_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int64_t batch = 32;
  const Tensor x = tk::testing::uniform({batch, 784}, 3);
  Tensor y({batch}, tk::DType::i32);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  tk::clear_session();
  const size_t gpu_baseline = tk::config::get_memory_info(gpu).current;
  tk::config::reset_peak_memory(gpu);
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{layers::Input({784}), layers::Dense(2048, "relu"),
                                                                      layers::Dense(1024, "relu"), layers::Dense(10)});
  m->set_device(gpu);
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  m->train_on_batch({x}, {y});
  const tk::MemoryPlan plan = m->memory_plan(batch);
  EXPECT_EQ(plan.file_staging, tk::io::kFileStagingBytes) << "the 6.1 MiB first kernel's slots stream in 4 MiB pieces";

  const size_t cpu_before = tk::config::get_memory_info(cpu).current;
  tk::config::reset_peak_memory(cpu);
  m->save((dir / "m.keras").string());
  m->save_weights((dir / "m.weights.h5").string());
  tk::io::save_training_state(dir / "latest.tkstate", m->training_state_view());
  const size_t cpu_rise = tk::config::get_memory_info(cpu).peak - cpu_before;
  const size_t gpu_peak = tk::config::get_memory_info(gpu).peak - gpu_baseline;
  std::printf("[ memory ] saves on cuda:0: cpu peak +%zu bytes (file staging %zu), gpu peak %zu (plan %zu)\n", cpu_rise,
              plan.file_staging, gpu_peak, plan.total);
  EXPECT_EQ(cpu_rise, plan.file_staging) << plan.to_string();
  EXPECT_EQ(tk::config::get_memory_info(cpu).current, cpu_before);
  EXPECT_EQ(gpu_peak, plan.total) << plan.to_string();

  const std::vector<std::vector<Tensor>> slots = m->get_optimizer_slots();
  std::unique_ptr<tk::Model> back = tk::models::load_model((dir / "m.keras").string());
  const std::vector<std::vector<Tensor>> slots2 = back->get_optimizer_slots();
  ASSERT_EQ(slots.size(), slots2.size());
  for (size_t i = 0; i < slots.size(); ++i)
    for (size_t k = 0; k < slots[i].size(); ++k)
      EXPECT_EQ(std::memcmp(slots[i][k].raw(), slots2[i][k].raw(), slots[i][k].nbytes()), 0) << i << "/" << k;
  fs::remove_all(dir);
}

}  // namespace
