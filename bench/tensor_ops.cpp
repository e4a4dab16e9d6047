// Three tensor workloads through the graph runtime, timed op by op against PyTorch and Keras (bench/tensor_ops.sh
// runs this beside bench/peers/torch_ops.py and bench/peers/keras_ops.py and prints medians and ratios):
//   layer_norm_fwd_bwd  LayerNormalization (Keras defaults, epsilon 1e-3) over x (4096, 512) float32: y and the
//                       gradients for x, gamma and beta of sum(y * dy) (autodiff takes scalar losses only). The
//                       loss's ops (owner "loss"; the forward multiply and sum are no program output and do not run)
//                       and their gradients (BroadcastTo of the seed, times dy: two extra passes over (4096, 512)) are
//                       work PyTorch's y.backward(dy) does not do: their share of the step, from the per-op profiler,
//                       is taken out in a second line, layer_norm_fwd_bwd_excl_loss (an estimate).
//   softmax_fwd         softmax over the last axis of (4096, 1024), forward only.
//   batch_matmul_fwd    (64, 128, 64) x (64, 64, 128) -> (64, 128, 128), forward only.
//   log_softmax_fwd     log_softmax over the last axis of (4096, 1024) (its composite: logsumexp and a subtract).
//   softmax_grad        SoftmaxGrad (dy, y) over (4096, 1024), y a softmax computed on the host.
// Each workload: --warmup untimed runs, then --iters runs timed one by one; "ms" is their median. One JSON line per
// workload on stdout; threads from TK_THREADS / OMP_NUM_THREADS (the script sets both to 2).
//
//   TK_THREADS=2 OMP_NUM_THREADS=2 ./build/bench/tk_bench_tensor_ops [--iters 30] [--warmup 5] [--only NAME]
#include "graph/tensor_ops.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
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
};

// warmup untimed runs, then iters runs timed one by one.
Timing time_runs(tk::graph::Program& p, int warmup, int iters) {
  const tk::graph::ExecContext ctx{};
  for (int i = 0; i < warmup; ++i) p.run(ctx);
  Timing t{};
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    p.run(ctx);
    p.synchronize();
    t.ms.push_back(1e3 * seconds(t0, Clock::now()));
  }
  std::vector<double> sorted = t.ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  t.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  t.min_ms = sorted.front();
  return t;
}

void print_line(const std::string& workload, const std::string& shapes, const Timing& t, const std::string& extra) {
  std::printf("{\"framework\":\"trainkit\",\"workload\":\"%s\",\"shapes\":\"%s\",\"ms\":%.4f,\"min_ms\":%.4f,",
              workload.c_str(), shapes.c_str(), t.median_ms, t.min_ms);
  std::printf("\"threads\":%d,\"cpu\":\"%s\"%s,\"runs_ms\":[", omp_get_max_threads(),
              tk::bench::cpu_description().c_str(), extra.c_str());
  for (size_t i = 0; i < t.ms.size(); ++i) std::printf("%s%.4f", i ? "," : "", t.ms[i]);
  std::printf("]}\n");
  std::fflush(stdout);
}

// The microseconds per run the profile report gives the ops whose owner tag satisfies `pick`
// (lines "  P%  T us  Op  owner  (shape)  dtype").
double profiled_us(const std::string& report, const std::function<bool(const std::string&)>& pick) {
  std::istringstream in(report);
  std::string line;
  double us = 0;
  std::getline(in, line);  // "program profile: ..."
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string pct, unit, op, owner;
    double t = 0;
    if (f >> pct >> t >> unit >> op >> owner && pick(owner)) us += t;
  }
  return us;
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
  tk::graph::OpBuilder b{g, nullptr, "loss"};
  const int loss = ops::reduce(b, tk::graph::ReduceFn::sum,
                               ops::binary(b, tk::graph::BinaryFn::multiply, y, g.variable("dy", dy)), {0, 1}, false);
  const std::vector<int> grads =
      tk::graph::gradients(g, {loss}, {xi, ctx.variable(layer->weights()[0]), ctx.variable(layer->weights()[1])});
  tk::graph::Program p(std::move(g), {y, grads[0], grads[1], grads[2]}, {}, tk::Device::cpu());
  const Timing t = time_runs(p, warmup, iters);

  // The loss's own ops (owner "loss") and their gradients ("grad:loss"), from the per-op profiler over as many runs.
  p.enable_profiling(true);
  const tk::graph::ExecContext ectx{};
  for (int i = 0; i < iters; ++i) p.run(ectx);
  const std::string report = p.profile_report(100000);
  const double all_us = profiled_us(report, [](const std::string&) { return true; });
  const double loss_us = profiled_us(report, [](const std::string& o) { return o == "loss" || o == "grad:loss"; });
  const double loss_ms = loss_us / 1e3, share = all_us > 0 ? loss_us / all_us : 0.0;
  std::fprintf(stderr, "%s", report.c_str());
  char extra[200];
  std::snprintf(extra, sizeof extra, ",\"loss_ops_ms\":%.4f,\"loss_ops_share\":%.4f", loss_ms, share);
  const std::string shapes = "x (4096, 512), gamma/beta (512)";
  print_line("layer_norm_fwd_bwd", shapes + ", loss sum(y*dy)", t, extra);
  // The same runs with the loss ops' profiled share taken out: what y.backward(dy) alone would cost (an estimate).
  Timing excl = t;
  for (double& m : excl.ms) m *= 1.0 - share;
  excl.median_ms *= 1.0 - share;
  excl.min_ms *= 1.0 - share;
  print_line("layer_norm_fwd_bwd_excl_loss", shapes + ", dy direct (estimate)", excl,
             ",\"estimate\":\"ms x (1 - loss_ops_share), per-op profile\"");
}

void softmax(int warmup, int iters) {
  tk::Tensor x = random_tensor(tk::Shape{4096, 1024}, 3);
  tk::graph::Graph g;
  const int xi = g.variable("x", x);
  tk::graph::OpBuilder b{g, nullptr, "softmax"};
  const int y = ops::softmax(b, xi, -1);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("softmax_fwd", "(4096, 1024), last axis", time_runs(p, warmup, iters), "");
}

// log_softmax over the last axis (graph/tensor_ops.h: x - logsumexp(x), a Reduce and a broadcast Binary), forward.
void log_softmax(int warmup, int iters) {
  tk::Tensor x = random_tensor(tk::Shape{4096, 1024}, 3);
  tk::graph::Graph g;
  const int xi = g.variable("x", x);
  tk::graph::OpBuilder b{g, nullptr, "log_softmax"};
  const int y = ops::log_softmax(b, xi, -1);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("log_softmax_fwd", "(4096, 1024), last axis", time_runs(p, warmup, iters), "");
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
  print_line("softmax_grad", "dy, y (4096, 1024), last axis", time_runs(p, warmup, iters), "");
}

void batch_matmul(int warmup, int iters) {
  tk::Tensor a = random_tensor(tk::Shape{64, 128, 64}, 4), c = random_tensor(tk::Shape{64, 64, 128}, 5);
  tk::graph::Graph g;
  const int ai = g.variable("a", a), ci = g.variable("b", c);
  tk::graph::OpBuilder b{g, nullptr, "bmm"};
  const int y = ops::batch_matmul(b, ai, ci);
  tk::graph::Program p(std::move(g), {y}, {}, tk::Device::cpu());
  print_line("batch_matmul_fwd", "(64, 128, 64) x (64, 64, 128)", time_runs(p, warmup, iters), "");
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
