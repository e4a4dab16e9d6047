// CUDA input staging on cuda:0 (GPU machines only; skipped with the reason elsewhere; tools/gpu_check.sh runs every
// Cuda* test): PinnedStaging's copies land whole and in order (no gather overwrites a pinned buffer a queued copy
// still reads; the default stream sees each copy done), and models trained through it (uint8 inputs converted and
// rescaled at staging, a last partial batch, validation and micro-batches: several programs, each with its own
// pinned buffers) end with the cpu's losses and weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/pinned_staging.h"
#include "core/device_bytes.h"
#include "cuda_test_support.h"
#include "runtime/cuda_device.h"
#include "trainkit/data/dataset.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;
namespace layers = tk::layers;

// Batches 0..5 queued back to back, each into its own device buffers (32 MiB and 4 KiB, so a copy takes long enough
// for a missing wait to show): batch k+2 is gathered into the pinned buffer batch k's copy reads, so without the host
// waiting for that copy, batch k's device buffer would hold some of batch k+2's bytes.
TEST(CudaStagingGpu, QueuedCopiesLandWholeAndTheDefaultStreamSeesThem) {
  SKIP_WITHOUT_GPU();
  const tk::Device dev = tk::Device::cuda(0);
  const size_t big = size_t{32} << 20, small = 4096;
  const int batches = 6;
  std::vector<Tensor> dst_big, dst_small;  // per batch: (32 MiB) and (4096) uint8 on cuda:0
  for (int k = 0; k < batches; ++k) {
    dst_big.emplace_back(tk::Shape{static_cast<int64_t>(big)}, tk::DType::u8, dev, "staging test");
    dst_small.emplace_back(tk::Shape{static_cast<int64_t>(small)}, tk::DType::u8, dev, "staging test");
  }
  tk::cuda::PinnedStaging s(dev, {big, small}, nullptr);
  for (int k = 0; k < batches; ++k) {
    auto* host = static_cast<unsigned char*>(s.acquire());
    std::memset(host + s.offset(0), 0x10 + k, big);
    std::memset(host + s.offset(1), 0x80 + k, small);
    s.copy(0, dst_big[static_cast<size_t>(k)].raw(), big);
    s.copy(1, dst_small[static_cast<size_t>(k)].raw(), small);
    s.submit();
  }
  // device_copy runs on the default stream, the compute stream here: it is ordered after the copies by their events.
  std::vector<unsigned char> back(big);
  for (int k = 0; k < batches; ++k) {
    tk::device_copy(back.data(), tk::Device::cpu(), dst_big[static_cast<size_t>(k)].raw(), dev, big);
    size_t wrong = 0;
    for (unsigned char v : back) wrong += v != static_cast<unsigned char>(0x10 + k);
    EXPECT_EQ(wrong, 0u) << "batch " << k << " (32 MiB region)";
    tk::device_copy(back.data(), tk::Device::cpu(), dst_small[static_cast<size_t>(k)].raw(), dev, small);
    wrong = 0;
    for (size_t i = 0; i < small; ++i) wrong += back[i] != static_cast<unsigned char>(0x80 + k);
    EXPECT_EQ(wrong, 0u) << "batch " << k << " (4 KiB region)";
  }
  // More bytes than a region holds are refused before anything is written or queued.
  s.acquire();
  EXPECT_THROW(s.copy(1, dst_small[0].raw(), small + 1), tk::InvalidArgument);
  s.abandon();
}

std::unique_ptr<tk::Sequential> image_model(tk::Device device) {
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{
      layers::Input({24}), layers::Rescaling(1.0f / 255, -0.5f), layers::Dense(16, "relu"), layers::Dense(4)});
  m->set_device(device);
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

// uint8 features (converted to float32 and rescaled while staged into the pinned buffer) and int32 labels.
TEST(CudaStagingGpu, TrainingThroughPinnedStagingMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t n = 200;  // batches of 48: four of 48 and a last one of 8 (a second train program)
  Tensor x({n, 24}, tk::DType::u8), y({n}, tk::DType::i32);
  std::mt19937 gen(11);
  for (int64_t i = 0; i < n; ++i) {
    int s = 0;
    for (int64_t c = 0; c < 24; ++c) {
      const auto v = static_cast<uint8_t>(gen() % 256);
      x.data<uint8_t>()[i * 24 + c] = v;
      s += c % 2 ? v : -v;
    }
    y.data<int32_t>()[i] = (s > 0) + 2 * (x.data<uint8_t>()[i * 24] > 127);
  }
  tk::utils::set_random_seed(5);
  auto cpu = image_model(tk::Device::cpu());
  auto gpu = image_model(tk::Device::cuda(0));
  const std::vector<Tensor> initial = cpu->get_weights();
  gpu->set_weights(initial);
  const auto data = tk::data::Dataset::from_tensor_slices({x, y}).batch(48);
  tk::FitOptions o;
  o.epochs = 3;
  o.verbose = 0;
  o.validation_dataset = tk::data::Dataset::from_tensor_slices({x, y}).batch(64);  // the eval programs
  const tk::History hc = cpu->fit(data, o);
  const tk::History hg = gpu->fit(data, o);
  for (const char* key : {"loss", "val_loss"}) {
    const std::vector<double>& lc = hc.history.at(key);
    const std::vector<double>& lg = hg.history.at(key);
    ASSERT_EQ(lc.size(), lg.size()) << key;
    for (size_t e = 0; e < lc.size(); ++e) EXPECT_NEAR(lg[e], lc[e], 1e-4 * std::fabs(lc[e])) << key << ", epoch " << e;
  }
  EXPECT_LT(tk::testing::worst_relative(gpu->get_weights(), cpu->get_weights()), 1e-4)
      << "weights after fit over a Dataset";
  EXPECT_GT(tk::testing::worst_relative(gpu->get_weights(), initial), 1e-3) << "it trained";
  // Arrays with micro-batches of 16: the accumulate programs' staging, shuffled rows (gathered by index).
  tk::FitOptions m;
  m.epochs = 2;
  m.batch_size = 64;
  m.micro_batch_size = 16;
  m.verbose = 0;
  m.seed = 9;
  const tk::History mc = cpu->fit(x, y, m);
  const tk::History mg = gpu->fit(x, y, m);
  const std::vector<double>& lc = mc.history.at("loss");
  const std::vector<double>& lg = mg.history.at("loss");
  ASSERT_EQ(lc.size(), lg.size());
  for (size_t e = 0; e < lc.size(); ++e) EXPECT_NEAR(lg[e], lc[e], 1e-4 * std::fabs(lc[e])) << "micro, epoch " << e;
  EXPECT_LT(tk::testing::worst_relative(gpu->get_weights(), cpu->get_weights()), 1e-4)
      << "weights after micro-batched fit";
}

}  // namespace
