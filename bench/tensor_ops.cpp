// Three tensor workloads through the graph runtime, timed op by op against PyTorch and Keras (bench/tensor_ops.sh
// runs this beside bench/peers/torch_ops.py and bench/peers/keras_ops.py and prints medians and ratios):
//   layer_norm_fwd_bwd  LayerNormalization (Keras defaults, epsilon 1e-3) over x (4096, 512) float32: y and the
//                       gradients for x, gamma and beta given dy, autodiff seeded with dy as y's output gradient
//                       (graph/autodiff.h): the work of PyTorch's y.backward(dy) and of Keras' GradientTape with
//                       output_gradients=dy, nothing more (until 2026-12-06 trainkit also ran a loss sum(y * dy) and
//                       its gradient, two extra passes over (4096, 512) its peers never made).
//   softmax_fwd         softmax over the last axis of (4096, 1024), forward only.
//   batch_matmul_fwd    (64, 128, 64) x (64, 64, 128) -> (64, 128, 128), forward only.
//   log_softmax_fwd     log_softmax over the last axis of (4096, 1024): one LogSoftmax op (a logsumexp Reduce and a
//                       broadcast subtract until 2026-12-06).
//   softmax_grad        SoftmaxGrad (dy, y) over (4096, 1024), y a softmax computed on the host.
// Each workload: --warmup untimed runs, then --iters runs timed one by one; "ms" is their median, "cpu_ms" the median
// of the process's CPU time per run (on a loaded machine the least disturbed figure at one thread; at two it also
// counts OpenMP's spinning at barriers). One JSON line per workload on stdout; threads from TK_THREADS /
// OMP_NUM_THREADS (the script sets both to 2). --profile 1: each workload's per-op profile (the program profiler
// over as many runs again) on stderr.
//
//   TK_THREADS=2 OMP_NUM_THREADS=2 ./build/bench/tk_bench_tensor_ops [--iters 30] [--warmup 5] [--only NAME]
#include "graph/tensor_ops.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "nn/layers/context.h"
#include "trainkit/nn/layers.h"

namespace {

using tk::bench::Clock;
using tk::bench::seconds;
namespace ops = tk::graph::ops;

tk::Tensor random_tensor(tk::Shape shape, uint32_t seed) {
  tk::Tensor t(std::move(shape), tk::DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = normal(rng);
  return t;
}

struct Timing {
  double median_ms, min_ms;
  std::vector<double> ms;
  double cpu_ms;  // the median over runs of the process's CPU time per run (all threads)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

// warmup untimed runs, then iters runs timed one by one.
Timing time_runs(tk::graph::Program& p, int warmup, int iters) {
  const tk::graph::ExecContext ctx{};
  for (int i = 0; i < warmup; ++i) p.run(ctx);
  Timing t{};
  std::vector<double> cpu;
  for (int i = 0; i < iters; ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    p.run(ctx);
    p.synchronize();
    t.ms.push_back(1e3 * seconds(t0, Clock::now()));
    cpu.push_back(process_cpu_ms() - c0);
  }
  t.median_ms = median(t.ms);
  t.min_ms = *std::min_element(t.ms.begin(), t.ms.end());
  t.cpu_ms = median(cpu);
  return t;
}

void print_line(const std::string& workload, const std::string& shapes, const Timing& t, const std::string& extra) {
  std::printf("{\"framework\":\"trainkit\",\"workload\":\"%s\",\"shapes\":\"%s\",\"ms\":%.4f,\"min_ms\":%.4f,",
              workload.c_str(), shapes.c_str(), t.median_ms, t.min_ms);
  std::printf("\"cpu_ms\":%.4f,\"threads\":%d,\"cpu\":\"%s\"%s,\"runs_ms\":[", t.cpu_ms, omp_get_max_threads(),
              tk::bench::cpu_description().c_str(), extra.c_str());
  for (size_t i = 0; i < t.ms.size(); ++i) std::printf("%s%.4f", i ? "," : "", t.ms[i]);
  std::printf("]}\n");
  std::fflush(stdout);
}

bool g_profile = false;  // --profile 1

// Times p (warmup untimed runs, then iters timed), with its per-op profile on stderr when --profile asks.
Timing measure(tk::graph::Program& p, int warmup, int iters, const char* workload) {
  const Timing t = time_runs(p, warmup, iters);
  if (g_profile) {
    p.enable_profiling(true);
    const tk::graph::ExecContext ctx{};
    for (int i = 0; i < iters; ++i) p.run(ctx);
    std::fprintf(stderr, "%s: %s", workload, p.profile_report(100000).c_str());
  }
  return t;
}

void layer_norm(int warmup, int iters) {
  const int64_t rows = 4096, features = 512;
  tk::Tensor x = random_tensor(tk::Shape{rows, features}, 1), dy = random_tensor(tk::Shape{rows, features}, 2);
  tk::LayerPtr layer = tk::layers::LayerNormalization({});
  (*layer)(tk::Input(tk::Shape{features}));  // builds gamma (ones) and beta (zeros)
  tk::graph::Graph g;
  tk::nn::CallContext ctx{g, true, tk::DType::f32, {}, {}, {}};
  const int xi = g.variable("x", x);
  const int y = layer->call(ctx, {xi});
  const std::vector<int> grads =
      tk::graph::gradients(g, {y}, {xi, ctx.variable(layer->weights()[0]), ctx.variable(layer->weights()[1])}, nullptr,
                           g.variable("dy", dy));
  tk::graph::Program p(std::move(g), {y, grads[0], grads[1], grads[2]}, {}, tk::Device::cpu());
  print_line("layer_norm_fwd_bwd", "x (4096, 512), gamma/beta (512), dy as y's output gradient",
             measure(p, warmup, iters, "layer_norm_fwd_bwd"), "");
}

void softmax(int warmup, int iters) {
  tk::Tensor x = random_tensor(tk::Shape{4096, 1024}, 3);
  tk::graph::Graph g;
  const int xi = g.variable("x", x);
  tk::graph::OpBuilder b{g, nullptr, "softmax"};
  const int y = ops::softmax(b, xi, -1);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("softmax_fwd", "(4096, 1024), last axis", measure(p, warmup, iters, "softmax_fwd"), "");
}

// log_softmax over the last axis (graph/tensor_ops.h: one LogSoftmax op for the last axis), forward.
void log_softmax(int warmup, int iters) {
  tk::Tensor x = random_tensor(tk::Shape{4096, 1024}, 3);
  tk::graph::Graph g;
  const int xi = g.variable("x", x);
  tk::graph::OpBuilder b{g, nullptr, "log_softmax"};
  const int y = ops::log_softmax(b, xi, -1);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("log_softmax_fwd", "(4096, 1024), last axis", measure(p, warmup, iters, "log_softmax_fwd"), "");
}

// Softmax's gradient alone: dx = y * (dy - sum(dy * y)) per row (the SoftmaxGrad op autodiff emits), y a softmax
// computed here.
void softmax_grad(int warmup, int iters) {
  const int64_t rows = 4096, n = 1024;
  tk::Tensor y = random_tensor(tk::Shape{rows, n}, 3), dy = random_tensor(tk::Shape{rows, n}, 6);
  float* py = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += (py[r * n + j] = std::exp(py[r * n + j]));
    for (int64_t j = 0; j < n; ++j) py[r * n + j] = static_cast<float>(py[r * n + j] / sum);
  }
  tk::graph::Graph g;
  const int yi = g.variable("y", y), dyi = g.variable("dy", dy);
  const int dx = g.add(tk::graph::Op::SoftmaxGrad, {dyi, yi}, {}, "softmax_grad");
  tk::graph::Program p(std::move(g), {dx}, {}, tk::Device::cpu());
  print_line("softmax_grad", "dy, y (4096, 1024), last axis", measure(p, warmup, iters, "softmax_grad"), "");
}

void batch_matmul(int warmup, int iters) {
  tk::Tensor a = random_tensor(tk::Shape{64, 128, 64}, 4), c = random_tensor(tk::Shape{64, 64, 128}, 5);
  tk::graph::Graph g;
  const int ai = g.variable("a", a), ci = g.variable("b", c);
  tk::graph::OpBuilder b{g, nullptr, "bmm"};
  const int y = ops::batch_matmul(b, ai, ci);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("batch_matmul_fwd", "(64, 128, 64) x (64, 64, 128)", measure(p, warmup, iters, "batch_matmul_fwd"), "");
}

}  // namespace

int main(int argc, char** argv) try {
  int warmup = 5, iters = 30;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters"))
      iters = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--warmup"))
      warmup = std::max(0, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--only"))
      only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--profile"))
      g_profile = std::atoi(argv[i + 1]) != 0;
  }
  if (only.empty() || only == "layer_norm") layer_norm(warmup, iters);
  if (only.empty() || only == "softmax") softmax(warmup, iters);
  if (only.empty() || only == "batch_matmul") batch_matmul(warmup, iters);
  if (only.empty() || only == "log_softmax") log_softmax(warmup, iters);
  if (only.empty() || only == "softmax_grad") softmax_grad(warmup, iters);
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "tk_bench_tensor_ops: %s\n", e.what());
  return 1;
}
