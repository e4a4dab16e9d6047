// CUDA Graph replay of training steps (GPU machines only; skipped with the reason elsewhere; tools/gpu_check.sh runs
// them and they must not skip there): the MLP and the CNN trained with graphs (captured after a warm-up step, then
// replayed: the runs check that the model's programs were captured and replayed) end with the same bits as with
// TK_CUDA_GRAPHS=0 (plain launches of the same kernels on the same stream), with the lagged logs on and off and with
// micro-batches; a capture that fails falls back to plain launches with its reason logged once; a captured program
// reads its inputs' current values at every replay.
// The state machine itself is tested on the CPU (test_step_capture.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/compute_stream.h"
#include "core/device_bytes.h"
#include "cuda_test_support.h"
#include "graph/backend.h"
#include "graph/program.h"
#include "nn/compiler/programs.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;
namespace layers = tk::layers;

struct Env {
  const char* name;
  Env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~Env() { ::unsetenv(name); }
};

using tk::testing::uniform;
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
  int captures = 0, replays = 0;  // over the model's programs
};

// Trains a fresh model from `initial` with TK_CUDA_GRAPHS=graphs and TK_LOG_LAG=lag; N steps over several epochs
// with a last partial batch (another program, captured on its own); micro > 0: gradient accumulation over
// micro-batches of that size (micro 1: 48 micro-batches per step, whose logs outgrow a pinned log slot's first 256
// bytes mid-step: PinnedLogSlots::grow keeping the values already copied).
template <typename Make>
Trained train(Make make, const std::vector<Tensor>& initial, const Tensor& x, const Tensor& y, const char* graphs,
              const char* lag, int64_t micro = 0) {
  Env g("TK_CUDA_GRAPHS", graphs), l("TK_LOG_LAG", lag);
  auto m = make();
  m->set_weights(initial);
  tk::FitOptions o;
  o.epochs = 3;
  o.batch_size = 48;
  o.micro_batch_size = micro;
  o.verbose = 0;
  o.seed = 3;
  ::testing::internal::CaptureStderr();
  const tk::History h = m->fit(x, y, o);
  Trained t;
  t.stderr_text = ::testing::internal::GetCapturedStderr();
  t.weights = m->get_weights();
  t.loss = h.history.at("loss");
  for (const tk::graph::Program* p : m->trainer().programs().programs()) {
    t.captures += p->capture().captures();
    t.replays += p->capture().replays();
  }
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
  // Same bits prove nothing if nothing was captured: the training programs (full and partial batch) were.
  EXPECT_EQ(plain.captures, 0);
  EXPECT_GE(graphs.captures, 2) << "the full-batch and the last partial batch's programs";
  EXPECT_GT(graphs.replays, graphs.captures) << "replayed after the capturing runs";
  EXPECT_GE(both.captures, 2);
  expect_same_bits(graphs, plain, "graphs vs plain launches");
  expect_same_bits(both, plain, "graphs and lagged logs vs plain launches");
  EXPECT_LT(plain.loss.back(), plain.loss.front()) << "it learns";
  // Micro-batches: the accumulate and apply programs captured, logs of 48 micro-batches per step read one step late.
  const Trained micro_plain = train(make, initial, x, y, "0", "0", 1);
  const Trained micro_both = train(make, initial, x, y, "1", "1", 1);
  EXPECT_EQ(micro_both.stderr_text.find("CUDA Graph capture"), std::string::npos) << micro_both.stderr_text;
  EXPECT_GE(micro_both.captures, 2) << "accumulate and apply";
  EXPECT_GT(micro_both.replays, micro_both.captures);
  expect_same_bits(micro_both, micro_plain, "micro-batches: graphs and lagged logs vs plain launches");
}

// Writes `value` into every element of `t` (float32 on the device) in place: the program's variable keeps its address.
void set_on_device(tk::graph::Program& p, Tensor& t, float value) {
  p.synchronize();  // the last run no longer reads it
  const Tensor host = Tensor::full(t.shape(), value);
  tk::device_copy(t.raw(), t.device(), host.raw(), host.device(), host.nbytes());
}

void expect_all(const Tensor& result, float value, const std::string& when) {
  for (int64_t i = 0; i < result.numel(); ++i) ASSERT_EQ(result.data<float>()[i], value) << when << ", element " << i;
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
  p.run(ctx);  // warm-up
  expect_all(p.output(out), 6.0f, "the warm-up");
  ::testing::internal::CaptureStderr();
  // The failing capture and the runs after it: each must compute the step with the inputs of that moment (the warm-up
  // already wrote 6: a step not rerun after the failed capture would leave it).
  for (int i = 0; i < 3; ++i) {
    set_on_device(p, a, 4.0f + static_cast<float>(i));
    p.run(ctx);
    expect_all(p.output(out), 3.0f * (4.0f + static_cast<float>(i)), "run " + std::to_string(i + 2));
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p.capture().state(), tk::graph::StepCapture::State::failed);
  EXPECT_NE(err.find("CUDA Graph capture"), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA Graph capture"), err.rfind("CUDA Graph capture")) << "logged once: " << err;
  EXPECT_EQ(seen->begins, 1) << "never retried";
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
  expect_all(p.output(out), 6.0f, "the warm-up");
  // The capturing run and two replays, each with new input values (the output of the one before is not enough).
  for (int i = 0; i < 3; ++i) {
    set_on_device(p, a, 4.0f + static_cast<float>(i));
    p.run(ctx);
    expect_all(p.output(out), 3.0f * (4.0f + static_cast<float>(i)), i == 0 ? "the capturing run" : "a replay");
  }
  EXPECT_EQ(p.capture().state(), tk::graph::StepCapture::State::captured) << p.capture().reason();
  EXPECT_EQ(p.capture().captures(), 1);
  EXPECT_EQ(p.capture().replays(), 3);
}

}  // namespace
