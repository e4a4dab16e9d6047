// The CUDA convolutions on cuDNN and on im2col, on cuda:0 (GPU machines only; skipped with the reason elsewhere, and
// the cuDNN ones also where cuDNN is not loaded; tools/gpu_check.sh runs them). The op harness's convolution cases
// (tests/op_harness.h) against the cpu float32 result on both paths, with the path each call took counted; the same
// cases in float16 and bfloat16 on cuDNN in their own dtypes (conv_native16.cpp), and widened with TK_CUDA_NATIVE16
// off; a CNN trained twice under op determinism gives the same bits; its planned step is the measured peak with
// cuDNN, in float32 and under mixed_float16 / mixed_bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_loader.h"
#include "cuda_test_support.h"
#include "op_harness.h"
#include "trainkit/trainkit.h"

namespace tk::graph::harness {
namespace {

#define SKIP_WITHOUT_CUDNN()                                                                            \
  do {                                                                                                  \
    SKIP_WITHOUT_GPU();                                                                                 \
    if (!tk::cuda::cudnn_enabled()) GTEST_SKIP() << "cuDNN is not used: " << tk::cuda::cudnn_summary(); \
  } while (0)

// Symmetric padding: cuDNN runs them (the harness's "valid", "dilation2", "one channel" and "stride2x1 dilation1x2"
// windows; the last has different strides and dilations per axis, so a swapped h and w fails).
const std::vector<std::string> kCudnnCases = {"Conv2D valid",
                                              "Conv2D dilation2",
                                              "Conv2D one channel",
                                              "FusedConv2D bias valid",
                                              "FusedConv2D bias relu valid",
                                              "Conv2DGradInput valid",
                                              "Conv2DGradFilter valid",
                                              "Conv2DGradInput dilation2",
                                              "Conv2DGradFilter one channel",
                                              "Conv2D stride2x1 dilation1x2",
                                              "Conv2DGradInput stride2x1 dilation1x2",
                                              "Conv2DGradFilter stride2x1 dilation1x2"};
// Padding on one side only (TensorFlow's "same" with an even total): im2col runs them even with cuDNN on.
const std::vector<std::string> kAsymmetricCases = {"Conv2D same odd pad", "Conv2D stride2", "Conv2DGradInput stride2",
                                                   "Conv2DGradFilter same odd pad"};

const Target kCuda{DeviceKind::cuda, DType::f32};

// Each case's forward output on cuda:0 (in `target`'s dtype) against the cpu float32 one within the dtype's
// tolerance; returns how many calls took each path meanwhile.
tk::cuda::ConvPathCounts run_forward(const std::vector<std::string>& labels, Target target = kCuda) {
  const tk::cuda::ConvPathCounts before = tk::cuda::conv_path_counts();
  for (const std::string& label : labels) {
    SCOPED_TRACE(label);
    std::string skipped;
    check_forward(find_case(label), target, &skipped);
    EXPECT_EQ(skipped, "") << "a CUDA convolution kernel is missing";
  }
  const tk::cuda::ConvPathCounts after = tk::cuda::conv_path_counts();
  return {after.cudnn - before.cudnn, after.im2col - before.im2col, after.cudnn16 - before.cudnn16};
}

// cuDNN off for a scope (and back on).
struct Im2colOnly {
  Im2colOnly() { tk::cuda::set_cudnn_enabled(false); }
  ~Im2colOnly() { tk::cuda::set_cudnn_enabled(true); }
};

TEST(CudnnGpu, SymmetricConvolutionsRunOnCudnnAndMatchTheCpu) {
  SKIP_WITHOUT_CUDNN();
  const tk::cuda::ConvPathCounts n = run_forward(kCudnnCases);
  EXPECT_EQ(n.cudnn, static_cast<int64_t>(kCudnnCases.size())) << "every one of them ran on cuDNN";
  EXPECT_EQ(n.im2col, 0);
  // The gradient programs too (Conv2DGradInput and Conv2DGradFilter of each, on cuDNN).
  for (const std::string& label : {"Conv2D valid", "Conv2D dilation2", "FusedConv2D bias relu valid"}) {
    SCOPED_TRACE(label);
    std::string skipped;
    check_gradient_parity(find_case(label), kCuda, &skipped);
    EXPECT_EQ(skipped, "");
  }
}

TEST(CudnnGpu, AsymmetricPaddingRunsOnIm2colWithCudnnOn) {
  SKIP_WITHOUT_CUDNN();
  const tk::cuda::ConvPathCounts n = run_forward(kAsymmetricCases);
  EXPECT_EQ(n.cudnn, 0);
  EXPECT_EQ(n.im2col, static_cast<int64_t>(kAsymmetricCases.size()));
}

// float16 and bfloat16: cuDNN in the convolution's own dtype (float32 compute, one rounding), within the harness's
// 16-bit tolerance of the cpu float32 result (4 u forward, 8 u for the gradient programs); FusedConv2D's bias added in
// cuDNN's compute (beta = 1) and its relu after.
TEST(CudnnGpu, SixteenBitConvolutionsRunOnCudnnInTheirOwnDtype) {
  SKIP_WITHOUT_CUDNN();
  ASSERT_TRUE(tk::cuda::native16_conv_enabled()) << "TK_CUDA_NATIVE16=0 is set for this run";
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const Target target{DeviceKind::cuda, t};
    const tk::cuda::ConvPathCounts n = run_forward(kCudnnCases, target);
    std::printf("[ paths  ] %s: %lld on cuDNN in 16 bits, %lld float32 on cuDNN, %lld on im2col\n",
                std::string(dtype_name(t)).c_str(), static_cast<long long>(n.cudnn16), static_cast<long long>(n.cudnn),
                static_cast<long long>(n.im2col));
    EXPECT_EQ(n.cudnn16, static_cast<int64_t>(kCudnnCases.size())) << "every one of them ran natively";
    EXPECT_EQ(n.cudnn, 0) << "none widened to a float32 cuDNN convolution";
    EXPECT_EQ(n.im2col, 0);
    const tk::cuda::ConvPathCounts before = tk::cuda::conv_path_counts();
    for (const std::string& label : {"Conv2D valid", "Conv2D dilation2", "FusedConv2D bias relu valid"}) {
      SCOPED_TRACE(label);
      std::string skipped;
      check_gradient_parity(find_case(label), target, &skipped);
      EXPECT_EQ(skipped, "");
    }
    EXPECT_GT(tk::cuda::conv_path_counts().cudnn16, before.cudnn16);
    // Asymmetric padding: cuDNN cannot take it, so the widened kernel runs (float32 on im2col).
    const tk::cuda::ConvPathCounts a = run_forward(kAsymmetricCases, target);
    EXPECT_EQ(a.cudnn16, 0);
    EXPECT_EQ(a.im2col, static_cast<int64_t>(kAsymmetricCases.size()));
  }
}

// TK_CUDA_NATIVE16=0 (switched here): the same 16-bit cases run widened, on float32 cuDNN convolutions.
TEST(CudnnGpu, SixteenBitConvolutionsWidenWithNative16Off) {
  SKIP_WITHOUT_CUDNN();
  struct Widened {
    Widened() { tk::cuda::set_native16_conv_enabled(false); }
    ~Widened() { tk::cuda::set_native16_conv_enabled(true); }
  } off;
  const tk::cuda::ConvPathCounts n = run_forward(kCudnnCases, Target{DeviceKind::cuda, DType::bf16});
  EXPECT_EQ(n.cudnn16, 0);
  EXPECT_EQ(n.cudnn, static_cast<int64_t>(kCudnnCases.size()));
}

// The im2col path, on every machine with a GPU (with cuDNN switched off, as TK_CUDNN=0 does).
TEST(CudnnGpu, TheIm2colPathMatchesTheCpuWithCudnnOff) {
  SKIP_WITHOUT_GPU();
  const Im2colOnly off;
  const tk::cuda::ConvPathCounts n = run_forward(kCudnnCases);
  EXPECT_EQ(n.cudnn, 0);
  EXPECT_EQ(n.im2col, static_cast<int64_t>(kCudnnCases.size()));
  std::string skipped;
  check_gradient_parity(find_case("Conv2D valid"), kCuda, &skipped);
  EXPECT_EQ(skipped, "");
}

// ---- a small CNN on cuda:0
using tk::testing::uniform;
Tensor labels(int64_t n, uint32_t seed) {
  Tensor y({n}, DType::i32);
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 5);
  return y;
}
// Two "same" convolutions with symmetric padding (cuDNN), one with stride 2 on an even input (im2col). Adam by
// default; plain SGD where the CPU's weights are compared (Adam's update divides by sqrt(v): a near-zero gradient
// whose sign the summation order flips moves a weight by the full learning rate either way).
std::unique_ptr<Sequential> cnn(Device device, bool sgd = false, const std::string& policy = "float32") {
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{
      layers::Input({12, 12, 3}), layers::Conv2D(8, 3, "relu", {.padding = "same"}),
      layers::Conv2D(8, 5, "relu", {.padding = "same"}),
      layers::Conv2D(4, 3, "relu", {.strides = 2, .padding = "same"}), layers::Flatten(), layers::Dense(5)});
  m->set_device(device);
  m->set_dtype_policy(policy);
  m->compile(sgd ? optimizers::SGD({.learning_rate = 0.05f}) : optimizers::Adam(),
             losses::SparseCategoricalCrossentropy({.from_logits = true}));
  return m;
}

TEST(CudnnGpu, ACnnTrainedTwiceUnderOpDeterminismGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  config::enable_op_determinism();
  const Tensor x = uniform({96, 12, 12, 3}, 11), y = labels(96, 12);
  utils::set_random_seed(13);
  auto reference = cnn(Device::cpu(), /*sgd=*/true);
  const std::vector<Tensor> initial = reference->get_weights();
  FitOptions o;
  o.epochs = 2;
  o.batch_size = 32;
  o.verbose = 0;
  o.seed = 5;
  const std::vector<double> cpu_losses = reference->fit(x, y, o).history.at("loss");
  const tk::cuda::ConvPathCounts before = tk::cuda::conv_path_counts();
  std::vector<std::vector<Tensor>> runs;
  std::vector<std::vector<double>> losses;
  for (int run = 0; run < 2; ++run) {
    auto m = cnn(Device::cuda(0), /*sgd=*/true);
    m->set_weights(initial);
    losses.push_back(m->fit(x, y, o).history.at("loss"));
    runs.push_back(m->get_weights());
  }
  config::disable_op_determinism();
  const tk::cuda::ConvPathCounts after = tk::cuda::conv_path_counts();
  std::printf("[ paths  ] %lld convolution calls on cuDNN, %lld on im2col (%s)\n",
              static_cast<long long>(after.cudnn - before.cudnn), static_cast<long long>(after.im2col - before.im2col),
              tk::cuda::cudnn_summary().c_str());
  if (tk::cuda::cudnn_enabled()) EXPECT_GT(after.cudnn, before.cudnn);
  EXPECT_GT(after.im2col, before.im2col) << "the stride-2 layer's asymmetric padding";
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t t = 0; t < runs[0].size(); ++t)
    EXPECT_EQ(std::memcmp(runs[0][t].raw(), runs[1][t].raw(), runs[0][t].nbytes()), 0) << "weight " << t;
  EXPECT_EQ(losses[0], losses[1]);
  // Against the cpu: the same training within float32 reassociation (cuDNN's algorithms sum in their own orders):
  // the epochs' losses, and the weights (SGD: a reassociated gradient moves a weight by as little as it differs).
  ASSERT_EQ(losses[0].size(), cpu_losses.size());
  for (size_t e = 0; e < cpu_losses.size(); ++e)
    EXPECT_NEAR(losses[0][e], cpu_losses[e], 1e-4 * std::max(1.0, std::abs(cpu_losses[e]))) << "epoch " << e;
  EXPECT_LE(tk::testing::worst_relative(runs[0], reference->get_weights()), 1e-3);
}

// The memory plan holds with cuDNN: its workspace is carved from each convolution's planned workspace (the im2col
// rule, unchanged; for 16-bit convolutions the widened rule, inside which the native path's 16-bit filter copy and
// cuDNN's workspace fit), and cuDNN allocates nothing through trainkit's allocator. Each policy's step.
TEST(CudnnGpu, ThePlannedCnnStepIsTheMeasuredPeak) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const int64_t batch = 32;
  const Tensor x = uniform({batch, 12, 12, 3}, 21), y = labels(batch, 22);
  for (const std::string policy : {"float32", "mixed_float16", "mixed_bfloat16"}) {
    SCOPED_TRACE(policy);
    clear_session();
    const size_t baseline = config::get_memory_info(gpu).current;
    config::reset_peak_memory(gpu);
    {
      const tk::cuda::ConvPathCounts before = tk::cuda::conv_path_counts();
      auto m = cnn(gpu, /*sgd=*/false, policy);
      m->train_on_batch({x}, {y});
      const tk::cuda::ConvPathCounts after = tk::cuda::conv_path_counts();
      if (tk::cuda::cudnn_enabled() && policy == "float32") EXPECT_GT(after.cudnn, before.cudnn) << "cuDNN's step";
      if (tk::cuda::cudnn_enabled() && policy != "float32")
        EXPECT_GT(after.cudnn16, before.cudnn16) << "the step measured runs 16-bit convolutions on cuDNN";
      const size_t measured = config::get_memory_info(gpu).peak - baseline;
      const tk::MemoryPlan plan = m->memory_plan(batch);
      std::printf("[ memory ] cnn on cuda:0 (%s, %s), batch %lld: planned %zu bytes, measured %zu bytes\n",
                  policy.c_str(), tk::cuda::cudnn_summary().c_str(), static_cast<long long>(batch), plan.total,
                  measured);
      EXPECT_EQ(measured, plan.total) << plan.to_string();
    }
    clear_session();
  }
}

}  // namespace
}  // namespace tk::graph::harness
