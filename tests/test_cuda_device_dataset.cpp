// Dataset::on_device(arrays, cuda:0) on a GPU (skipped with the reason elsewhere; tools/gpu_check.sh runs them and
// they must not skip there): fit, evaluate and predict over the device-resident arrays, each batch gathered on the
// GPU straight into the program's inputs (backends/cuda/device_gather.cu), give what the same pipeline over host
// arrays gives on the same GPU model: the same batches in the same shuffled order, so the same losses and weights.
// Each checks that the device path ran: no row of the device arrays was copied back to the host
// (data::rows_copied_back, which a Slices gather from device memory adds to).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cuda_test_support.h"
#include "data/device_batches.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;
using tk::data::Dataset;
namespace layers = tk::layers;

Tensor uniform(tk::Shape shape, uint32_t seed) {
  Tensor t(std::move(shape), tk::DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}
// Labels 0..4 from a fixed rule over the features (divided by `scale`), so the model has something to learn.
Tensor labels_of(const Tensor& x, float scale = 1.0f) {
  const int64_t n = x.dim(0), f = x.numel() / x.dim(0);
  const Tensor v = x.to(tk::DType::f32);
  Tensor y({n}, tk::DType::i32);
  for (int64_t r = 0; r < n; ++r) {
    float s = 0;
    for (int64_t c = 0; c < f; ++c) s += v.data<float>()[r * f + c] * static_cast<float>((c % 3) - 1);
    y.data<int32_t>()[r] = static_cast<int32_t>(std::clamp(std::floor(s / scale + 2.5f), 0.0f, 4.0f));
  }
  return y;
}

std::unique_ptr<tk::Sequential> mlp(std::vector<tk::LayerPtr> head) {
  head.push_back(layers::Dense(32, "relu"));
  head.push_back(layers::Dense(5));
  auto m = std::make_unique<tk::Sequential>(std::move(head));
  m->set_device(tk::Device::cuda(0));
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

// Trains two copies of a model from the same weights, one on `host`, one on `device` (the same pipeline), and
// compares losses, weights, evaluate and predict.
// `tol`: relative; 1e-6 when the batches are the same bits.
void expect_same_training(const std::function<std::unique_ptr<tk::Sequential>()>& make, const Dataset& host,
                          const Dataset& device, double tol = 1e-6) {
  auto a = make();
  auto b = make();
  tk::utils::set_random_seed(11);
  b->set_weights(a->get_weights());
  const uint64_t copied_back = tk::data::rows_copied_back();
  tk::FitOptions o;
  o.epochs = 3;
  o.verbose = 0;
  const tk::History ha = a->fit(host, o);
  const tk::History hb = b->fit(device, o);
  const std::vector<double>& la = ha.history.at("loss");
  const std::vector<double>& lb = hb.history.at("loss");
  ASSERT_EQ(la.size(), lb.size());
  for (size_t e = 0; e < la.size(); ++e) EXPECT_NEAR(lb[e], la[e], tol * std::fabs(la[e])) << "epoch " << e;
  EXPECT_LT(lb.back(), lb.front()) << "it learns";
  EXPECT_LT(tk::testing::worst_relative(b->get_weights(), a->get_weights()), tol) << "weights, device vs host data";
  EXPECT_NEAR(b->evaluate(device, {.verbose = 0}).get("loss"), a->evaluate(host, {.verbose = 0}).get("loss"), tol);
  EXPECT_LT(tk::testing::worst_relative(b->predict(device), a->predict(host)), tol);
  EXPECT_EQ(tk::data::rows_copied_back(), copied_back) << "the batches were gathered on the device, none copied back";
}

TEST(CudaDeviceDataset, FitOverShuffledDeviceArraysMatchesTheHostDataset) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({640, 20}, 1), y = labels_of(x);
  // The same seed for both shuffles: the index pipeline copies the stages, seeds included.
  const Dataset host = Dataset::from_tensor_slices({x, y}).shuffle(640, 5).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).shuffle(640, 5).batch(64);
  expect_same_training([] { return mlp({layers::Input({20})}); }, host, device);
}

// uint8 features with a Rescaling fused into staging: the gather kernel converts and scales as the host staging does.
// Unshuffled batches of 64 (the last one short): the consecutive-rows paths (copy for the labels, the kernel from a
// first row for the pixels).
TEST(CudaDeviceDataset, Uint8PixelsAreConvertedAndScaledOnTheDevice) {
  SKIP_WITHOUT_GPU();
  Tensor x({600, 16}, tk::DType::u8);
  std::mt19937 gen(3);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(gen() & 0xff);
  const Tensor y = labels_of(x, 255.0f);
  const Dataset host = Dataset::from_tensor_slices({x, y}).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).batch(64);
  // The offset is 0, so the bits are the host's: the kernel's fmaf(x, 1/255, 0) rounds x * (1/255) once, as the host's
  // x * (1/255) + 0 does, contracted or not. (With an offset they may differ by one ulp: the next test.)
  expect_same_training([] { return mlp({layers::Input({16}), layers::Rescaling(1.0f / 255)}); }, host, device);
}

// A Rescaling with an offset, x / 127.5 - 1, shuffled: the kernel rounds x * scale + offset once (fmaf,
// device_gather.cu); the host staging (core/convert.cpp) rounds once only where the compiler contracts it into an FMA
// (-march=native with FMA), twice in a portable build, and its bits are pinned by the CPU parity tests, so an input
// may differ by one ulp (6e-8 relative): 1e-5 leaves room for that through 3 epochs.
TEST(CudaDeviceDataset, AnOffsetRescalingIsWithinOneUlpOfTheHost) {
  SKIP_WITHOUT_GPU();
  Tensor x({500, 16}, tk::DType::u8);
  std::mt19937 gen(4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(gen() & 0xff);
  const Tensor y = labels_of(x, 255.0f);
  const Dataset host = Dataset::from_tensor_slices({x, y}).shuffle(500, 9).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).shuffle(500, 9).batch(64);
  expect_same_training(
      [] {
        return mlp({layers::Input({16}), layers::Rescaling(1.0f / 127.5f, -1.0f)});
      },
      host, device, 1e-5);
}

// repeat(2) before batch(64) over 600 rows: the batch across the repeat holds rows 576..599 then 0..39, two runs of
// consecutive rows, so the same-dtype inputs take the copy plan with two cudaMemcpyAsync; the last batch is short
// (1200 = 18 * 64 + 48).
TEST(CudaDeviceDataset, ABatchOfTwoRunsIsCopiedRunByRun) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({600, 20}, 6), y = labels_of(x);
  const Dataset host = Dataset::from_tensor_slices({x, y}).repeat(2).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).repeat(2).batch(64);
  expect_same_training([] { return mlp({layers::Input({20})}); }, host, device);
}

// Shuffled, 610 rows in batches of 64: the last batch (34 rows) is a second program, gathered by the kernel too.
TEST(CudaDeviceDataset, AShuffledPartialLastBatchMatchesTheHostDataset) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({610, 20}, 7), y = labels_of(x);
  const Dataset host = Dataset::from_tensor_slices({x, y}).shuffle(610, 3).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).shuffle(610, 3).batch(64);
  expect_same_training([] { return mlp({layers::Input({20})}); }, host, device);
}

// evaluate and predict first, before any fit built the training programs: the eval / predict programs gather alone.
TEST(CudaDeviceDataset, EvaluateAndPredictBeforeAnyFit) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({300, 20}, 8), y = labels_of(x);
  const Dataset host = Dataset::from_tensor_slices({x, y}).shuffle(300, 4).batch(64);
  const Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).shuffle(300, 4).batch(64);
  auto a = mlp({layers::Input({20})});
  auto b = mlp({layers::Input({20})});
  b->set_weights(a->get_weights());
  const uint64_t copied_back = tk::data::rows_copied_back();
  EXPECT_NEAR(b->evaluate(device, {.verbose = 0}).get("loss"), a->evaluate(host, {.verbose = 0}).get("loss"), 1e-6);
  const std::vector<Tensor> pb = b->predict(device), pa = a->predict(host);
  ASSERT_EQ(pb.size(), pa.size());
  EXPECT_EQ(pb[0].dim(0), 300);
  EXPECT_LT(tk::testing::worst_relative(pb, pa), 1e-6) << "the same rows in the same (shuffled) order";
  EXPECT_EQ(tk::data::rows_copied_back(), copied_back);
}

// fit with validation_steps over a reshuffling dataset, then evaluate(steps), then fit again: every pass is numbered
// as over host arrays (nn::evaluation_pass), so the validation rows, the evaluate rows and the second fit's order
// are the host's and the losses and weights match.
TEST(CudaDeviceDataset, StepsLimitedEvaluationKeepsThePassNumbersOfTheHostPath) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({512, 20}, 9), y = labels_of(x);
  for (const bool prefetch : {true, false}) {
    Dataset host = Dataset::from_tensor_slices({x, y}).shuffle(512, 6).batch(32);
    Dataset device = Dataset::on_device({x, y}, tk::Device::cuda(0)).shuffle(512, 6).batch(32);
    if (prefetch) {
      host = host.prefetch(2);
      device = device.prefetch(2);
    }
    auto a = mlp({layers::Input({20})});
    auto b = mlp({layers::Input({20})});
    b->set_weights(a->get_weights());
    tk::FitOptions o;
    o.epochs = 2;
    o.verbose = 0;
    o.validation_steps = 3;
    o.validation_dataset = host;
    const tk::History ha = a->fit(host, o);
    o.validation_dataset = device;
    const tk::History hb = b->fit(device, o);
    const std::vector<double>& va = ha.history.at("val_loss");
    const std::vector<double>& vb = hb.history.at("val_loss");
    ASSERT_EQ(va.size(), vb.size());
    for (size_t e = 0; e < va.size(); ++e) EXPECT_NEAR(vb[e], va[e], 1e-6 * std::fabs(va[e])) << "epoch " << e;
    EXPECT_NEAR(b->evaluate(device, {.verbose = 0, .steps = 2}).get("loss"),
                a->evaluate(host, {.verbose = 0, .steps = 2}).get("loss"), 1e-6);
    o.validation_dataset = std::nullopt;
    a->fit(host, o);
    b->fit(device, o);
    EXPECT_LT(tk::testing::worst_relative(b->get_weights(), a->get_weights()), 1e-6) << "prefetch: " << prefetch;
  }
}

TEST(CudaDeviceDataset, AModelOnTheCpuIsToldToMove) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({64, 20}, 2), y = labels_of(x);
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{layers::Input({20}), layers::Dense(5)});
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  try {
    m->fit(Dataset::on_device({x, y}, tk::Device::cuda(0)).batch(16), {.verbose = 0});
    FAIL() << "expected InvalidArgument";
  } catch (const tk::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.set_device(cuda:0)"), std::string::npos) << e.what();
  }
  // A map with a host function over the device arrays: fit says why it cannot gather on the device.
  auto g = mlp({layers::Input({20})});
  const Dataset mapped =
      Dataset::on_device({x, y}, tk::Device::cuda(0)).map([](tk::data::Element e) { return e; }).batch(16);
  EXPECT_THROW(g->fit(mapped, {.verbose = 0}), tk::InvalidArgument);
  // Iterating by hand copies the rows back to the host.
  tk::data::Iterator it = Dataset::on_device({x, y}, tk::Device::cuda(0)).batch(16).iterator();
  tk::data::Element e;
  ASSERT_TRUE(it.next(e));
  ASSERT_TRUE(e[0].on_host());
  EXPECT_EQ(e[0].data<float>()[17], x.data<float>()[17]);
  EXPECT_GE(tk::data::rows_copied_back(), 16u) << "the counter the other tests rely on counts this path";
}

}  // namespace
