// CUDA Graph replay of training steps (GPU machines only; skipped with the reason elsewhere; tools/gpu_check.sh runs
// them and they must not skip there): the MLP and the CNN trained with graphs (captured after a warm-up step, then
// replayed) end with the same bits as with TK_CUDA_GRAPHS=0 (plain launches of the same kernels on the same stream),
// with the lagged logs on and off; a capture that fails falls back to plain launches with its reason logged once.
// The state machine itself is tested on the CPU (test_step_capture.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/compute_stream.h"
#include "cuda_test_support.h"
#include "graph/backend.h"
#include "graph/program.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;
namespace layers = tk::layers;

struct Env {
  const char* name;
  Env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~Env() { ::unsetenv(name); }
};

Tensor uniform(tk::Shape shape, uint32_t seed) {
  Tensor t(std::move(shape), tk::DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}
Tensor labels(int64_t n, uint32_t seed) {
  Tensor y({n}, tk::DType::i32);
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(gen() % 5);
  return y;
}

std::unique_ptr<tk::Sequential> mlp() {
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{layers::Input({20}), layers::Dense(32, "relu"),
                                                                      layers::Dropout(0.25, 42), layers::Dense(5)});
  m->set_device(tk::Device::cuda(0));
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

std::unique_ptr<tk::Sequential> cnn() {
  layers::Conv2DOptions same;
  same.padding = "same";
  auto m = std::make_unique<tk::Sequential>(
      std::vector<tk::LayerPtr>{layers::Input({12, 12, 2}), layers::Conv2D(8, 3, "relu", same), layers::MaxPooling2D(2),
                                layers::Flatten(), layers::Dense(5)});
  m->set_device(tk::Device::cuda(0));
  m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

struct Trained {
  std::vector<Tensor> weights;
  std::vector<double> loss;
  std::string stderr_text;
};

// Trains a fresh model from `initial` with TK_CUDA_GRAPHS=graphs and TK_LOG_LAG=lag; N steps over several epochs
// with a last partial batch (another program, captured on its own).
template <typename Make>
Trained train(Make make, const std::vector<Tensor>& initial, const Tensor& x, const Tensor& y, const char* graphs,
              const char* lag) {
  Env g("TK_CUDA_GRAPHS", graphs), l("TK_LOG_LAG", lag);
  auto m = make();
  m->set_weights(initial);
  tk::FitOptions o;
  o.epochs = 3;
  o.batch_size = 48;
  o.verbose = 0;
  o.seed = 3;
  ::testing::internal::CaptureStderr();
  const tk::History h = m->fit(x, y, o);
  Trained t;
  t.stderr_text = ::testing::internal::GetCapturedStderr();
  t.weights = m->get_weights();
  t.loss = h.history.at("loss");
  return t;
}

void expect_same_bits(const Trained& a, const Trained& b, const char* what) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t t = 0; t < a.weights.size(); ++t)
    EXPECT_EQ(std::memcmp(a.weights[t].raw(), b.weights[t].raw(), a.weights[t].nbytes()), 0)
        << what << ": weight " << t;
  EXPECT_EQ(a.loss, b.loss) << what;
}

template <typename Make>
void replay_matches_plain(Make make, const Tensor& x, const Tensor& y) {
  const std::vector<Tensor> initial = make()->get_weights();
  const Trained plain = train(make, initial, x, y, "0", "0");
  const Trained graphs = train(make, initial, x, y, "1", "0");
  const Trained both = train(make, initial, x, y, "1", "1");
  EXPECT_EQ(graphs.stderr_text.find("CUDA Graph capture"), std::string::npos)
      << "the capture failed: " << graphs.stderr_text;
  expect_same_bits(graphs, plain, "graphs vs plain launches");
  expect_same_bits(both, plain, "graphs and lagged logs vs plain launches");
  EXPECT_LT(plain.loss.back(), plain.loss.front()) << "it learns";
}

TEST(CudaGraphs, ReplayGivesTheSameBitsAsPlainLaunchesMlp) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({200, 20}, 1), y = labels(200, 2);
  replay_matches_plain(mlp, x, y);
}

TEST(CudaGraphs, ReplayGivesTheSameBitsAsPlainLaunchesCnn) {
  SKIP_WITHOUT_GPU();
  const Tensor x = uniform({100, 12, 12, 2}, 3), y = labels(100, 4);
  replay_matches_plain(cnn, x, y);
}

// The real launcher, with a capture broken on purpose: a synchronization of the capturing stream (illegal while it
// captures) just before the capture ends. The program must log the reason once, run the step plainly, and never try
// again.
struct BrokenCapture : tk::graph::StepLauncher {
  std::unique_ptr<tk::graph::StepLauncher> real;
  int begins = 0;
  explicit BrokenCapture(std::unique_ptr<tk::graph::StepLauncher> r) : real(std::move(r)) {}
  void upload_scalars(void* dst, const void* host, size_t bytes, void* stream) override {
    real->upload_scalars(dst, host, bytes, stream);
  }
  void begin_capture(void* stream) override {
    ++begins;
    real->begin_capture(stream);
  }
  void end_capture(void* stream) override {
    tk::graph::ExecContext ctx;
    ctx.device = tk::Device::cuda(0);
    ctx.stream = stream;
    try {
      tk::graph::backend(tk::DeviceKind::cuda).synchronize(ctx);
    } catch (const tk::Error&) {  // the capture is invalidated; end_capture says so
    }
    real->end_capture(stream);
  }
  void abort_capture(void* stream) noexcept override { real->abort_capture(stream); }
  void launch(void* stream) override { real->launch(stream); }
  void reset() noexcept override { real->reset(); }
};

TEST(CudaGraphs, AFailedCaptureFallsBackWithItsReasonLoggedOnce) {
  SKIP_WITHOUT_GPU();
  const tk::Device dev = tk::Device::cuda(0);
  Tensor a = Tensor::full({1024}, 2.0f).to_device(dev), b = Tensor::full({1024}, 3.0f).to_device(dev);
  tk::graph::Graph g;
  const int va = g.variable("a", a), vb = g.variable("b", b);
  const int out = g.add(tk::graph::Op::Mul, {va, vb});
  tk::cuda::ComputeStream stream(dev);
  tk::graph::Program p(std::move(g), {out}, {}, dev);
  p.set_stream(stream.get());
  auto broken = std::make_unique<BrokenCapture>(tk::graph::backend(tk::DeviceKind::cuda).make_step_launcher(dev));
  BrokenCapture* seen = broken.get();
  p.set_step_launcher(std::move(broken));
  tk::graph::ExecContext ctx;
  ctx.device = dev;
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 4; ++i) p.run(ctx);
  const Tensor result = p.output(out);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p.capture().state(), tk::graph::StepCapture::State::failed);
  EXPECT_NE(err.find("CUDA Graph capture"), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA Graph capture"), err.rfind("CUDA Graph capture")) << "logged once: " << err;
  EXPECT_EQ(seen->begins, 1) << "never retried";
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(result.data<float>()[i], 6.0f) << i;
}

TEST(CudaGraphs, AProgramOnTheGpuIsCapturedAfterItsWarmUp) {
  SKIP_WITHOUT_GPU();
  const tk::Device dev = tk::Device::cuda(0);
  Tensor a = Tensor::full({1024}, 2.0f).to_device(dev), b = Tensor::full({1024}, 3.0f).to_device(dev);
  tk::graph::Graph g;
  const int va = g.variable("a", a), vb = g.variable("b", b);
  const int out = g.add(tk::graph::Op::Mul, {va, vb});
  tk::cuda::ComputeStream stream(dev);
  tk::graph::Program p(std::move(g), {out}, {}, dev);
  p.set_stream(stream.get());
  tk::graph::ExecContext ctx;
  ctx.device = dev;
  p.run(ctx);
  EXPECT_EQ(p.capture().state(), tk::graph::StepCapture::State::warm) << p.capture().reason();
  for (int i = 0; i < 3; ++i) p.run(ctx);
  EXPECT_EQ(p.capture().state(), tk::graph::StepCapture::State::captured) << p.capture().reason();
  EXPECT_EQ(p.capture().replays(), 3);
  const Tensor result = p.output(out);
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(result.data<float>()[i], 6.0f) << i;
}

}  // namespace
