// Dataset::on_device(arrays, cuda:0) on a GPU (skipped with the reason elsewhere; tools/gpu_check.sh runs them and
// they must not skip there): fit, evaluate and predict over the device-resident arrays, each batch gathered on the
// GPU straight into the program's inputs (backends/cuda/device_gather.cu), give what the same pipeline over host
// arrays gives on the same GPU model: the same batches in the same shuffled order, so the same losses and weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cuda_test_support.h"
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
  // x * (1/255) may round differently by one ulp: nvcc contracts it into an FMA, the host compiler may or may not.
  expect_same_training([] { return mlp({layers::Input({16}), layers::Rescaling(1.0f / 255)}); }, host, device, 1e-5);
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
}

}  // namespace
