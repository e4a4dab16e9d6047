// Input-pipeline benchmarks (bench/pipeline.sh runs them next to tf.data and prints ratios).
//
//   tk_bench_pipeline throughput [--epochs 3]
//     from_tensor_slices((x, y)) -> shuffle(10000) -> batch(128) -> prefetch(AUTOTUNE) over Fashion-MNIST-sized
//     arrays (x float32 (60000, 784), y uint8 (60000,)): batches per second, and the hand-off latency of a
//     ready batch (next() after the consumer slept long enough for the buffer to be full).
//   tk_bench_overlap overlap --element-us C --step-ms S --parallel P [--elements N] [--batch B]
//     A source whose elements cost C us of CPU each (fixed work calibrated to C us on an idle core, in a map
//     with num_parallel_calls = P) feeding a
//     "model step" of S ms (a sleep: the device computes while the host is free, as on a GPU). The epoch
//     can at best take max(steps * S, N * C / P); the ratio measured / bound is printed.
// Output: one JSON line.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trainkit/data/dataset.h"

namespace {

using Clock = std::chrono::steady_clock;
using tk::Tensor;
using tk::data::AUTOTUNE;
using tk::data::Dataset;
using tk::data::Element;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double arg(int argc, char** argv, const char* name, double fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::stod(argv[i + 1]);
  return fallback;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

int throughput(int argc, char** argv) {
  const int epochs = static_cast<int>(arg(argc, argv, "--epochs", 3));
  const int64_t n = 60000;
  Tensor x({n, 784}, tk::DType::f32), y({n}, tk::DType::u8);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < n * 784; ++i) x.data<float>()[i] = static_cast<float>(rng() % 256) / 255.0f;
  for (int64_t i = 0; i < n; ++i) y.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 10);
  Dataset d = Dataset::from_tensor_slices({x, y}).shuffle(10000, 42).batch(128).prefetch(AUTOTUNE);

  Element b;
  int64_t batches = 0;
  {  // warm-up pass (page faults, thread start)
    tk::data::Iterator it = d.iterator();
    while (it.next(b)) {
    }
  }
  const auto t0 = Clock::now();
  double checksum = 0;
  for (int e = 0; e < epochs; ++e) {
    tk::data::Iterator it = d.iterator();
    while (it.next(b)) {
      checksum += b[0].data<float>()[0];
      ++batches;
    }
  }
  const double secs = seconds_since(t0);

  // Hand-off latency: give the prefetch thread time to fill the buffer, then time next().
  std::vector<double> handoff;
  tk::data::Iterator it = d.iterator();
  for (int i = 0; i < 200 && it.next(b); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const auto t = Clock::now();
    if (!it.next(b)) break;
    handoff.push_back(seconds_since(t) * 1e6);
  }
  std::printf(
      "{\"peer\": \"trainkit\", \"bench\": \"throughput\", \"batches_per_s\": %.1f, \"handoff_p50_us\": %.2f, "
      "\"handoff_p99_us\": %.2f, \"checksum\": %.3f}\n",
      static_cast<double>(batches) / secs, quantile(handoff, 0.5), quantile(handoff, 0.99), checksum);
  return 0;
}

// A fixed amount of CPU work (not a wall-clock wait: a descheduled thread must not finish early), calibrated
// once so that it takes `us` microseconds on an idle core.
uint64_t work(uint64_t iterations) {
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}
std::atomic<uint64_t> g_sink{0};
double iterations_per_us() {
  uint64_t n = 1 << 16;
  double secs = 0;
  while (secs < 0.05) {
    n *= 2;
    const auto t = Clock::now();
    g_sink += work(n);
    secs = seconds_since(t);
  }
  return static_cast<double>(n) / (secs * 1e6);
}

int overlap(int argc, char** argv) {
  const double element_us = arg(argc, argv, "--element-us", 200);
  const double step_ms = arg(argc, argv, "--step-ms", 10);
  const auto parallel = static_cast<int64_t>(arg(argc, argv, "--parallel", 2));
  const auto n = static_cast<int64_t>(arg(argc, argv, "--elements", 6400));
  const auto batch = static_cast<int64_t>(arg(argc, argv, "--batch", 64));
  const auto iterations = static_cast<uint64_t>(element_us * iterations_per_us());
  Dataset d = Dataset::range(n)
                  .map(
                      [iterations](Element e) {
                        g_sink += work(iterations);
                        return e;
                      },
                      {.num_parallel_calls = parallel})
                  .batch(batch)
                  .prefetch(AUTOTUNE);
  const auto t0 = Clock::now();
  tk::data::Iterator it = d.iterator();
  Element b;
  int64_t steps = 0;
  while (it.next(b)) {
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(step_ms * 1e3)));
    ++steps;
  }
  const double secs = seconds_since(t0);
  const double compute = static_cast<double>(steps) * step_ms * 1e-3;
  const double load = static_cast<double>(n) * element_us * 1e-6 / static_cast<double>(parallel);
  const double bound = std::max(compute, load);
  std::printf(
      "{\"peer\": \"trainkit\", \"bench\": \"overlap\", \"element_us\": %.1f, \"step_ms\": %.2f, \"parallel\": %lld, "
      "\"epoch_s\": %.4f, \"compute_s\": %.4f, \"load_over_parallel_s\": %.4f, \"ratio_to_bound\": %.4f}\n",
      element_us, step_ms, static_cast<long long>(parallel), secs, compute, load, secs / bound);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throughput";
  if (mode == "throughput") return throughput(argc, argv);
  if (mode == "overlap") return overlap(argc, argv);
  std::fprintf(stderr, "usage: tk_bench_pipeline throughput|overlap [options] (see bench/pipeline.cpp)\n");
  return 2;
}
