// Shared by the throughput benchmarks: the two-term roofline (sgemm rate, STREAM-triad bandwidth), the machine's
// ISA, and an epoch timer.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "trainkit/core/device.h"
#include "trainkit/nn/callbacks.h"

namespace tk::bench {

using Clock = std::chrono::steady_clock;
// --device's value: "cpu", "cpu:N", "cuda" or "cuda:N".
inline Device device_arg(const std::string& d) {
  const size_t colon = d.find(':');
  const int index = colon == std::string::npos ? 0 : std::atoi(d.c_str() + colon + 1);
  return d.rfind("cuda", 0) == 0 ? Device::cuda(index) : Device::cpu(index);
}

inline double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// /proc/self/status's `key` (VmRSS, VmHWM) in bytes; 0 when absent.
inline size_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
      return std::stoull(line.substr(n + 1)) * 1024;
  return 0;
}
// Resets VmHWM to the current RSS (the peer scripts do the same): a step's resident peak is then comparable.
inline void reset_hwm() { std::ofstream("/proc/self/clear_refs") << "5"; }

// GFLOP/s of C(m,n) = op(A) op(B) through OpenBLAS, best of three timed rounds.
inline double sgemm_gflops(int m, int n, int k, bool ta = false, bool tb = false) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  const int reps = std::max(3, int(2e9 / (2.0 * m * n * k)));
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                  a.data(), ta ? m : k, b.data(), tb ? k : n, 0.0f, c.data(), n);
    best = std::min(best, seconds(t0, Clock::now()) / reps);
  }
  return 2.0 * m * n * k / best / 1e9;
}

// STREAM triad a(i) = b(i) + s c(i) over three 128 MiB arrays on every OpenMP thread: GB/s counting 3 x 4 bytes
// per element (STREAM's convention: no write-allocate traffic), best of five.
inline double stream_triad_gbs() {
  const size_t n = size_t(32) << 20;
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0f * c[i];
    best = std::min(best, seconds(t0, Clock::now()));
  }
  return 3.0 * 4.0 * double(n) / best / 1e9;
}

// The step's roofline: its FLOPs at the sgemm(1024) rate plus its compulsory bytes at the triad bandwidth.
struct Roofline {
  double flops, bytes, gemm_gflops, triad_gbs;
  double compute_ms() const { return flops / gemm_gflops / 1e6; }
  double memory_ms() const { return bytes / triad_gbs / 1e6; }
  double ms() const { return compute_ms() + memory_ms(); }
  // A JSON object with every term.
  std::string json(double step_ms) const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "{\"flops_per_step\":%.4g,\"bytes_per_step\":%.4g,\"sgemm1024_gflops\":%.1f,\"triad_gbs\":%.1f,"
                  "\"compute_ms\":%.3f,\"memory_ms\":%.3f,\"roofline_ms\":%.3f,\"step_ms\":%.3f,"
                  "\"step_over_roofline\":%.3f}",
                  flops, bytes, gemm_gflops, triad_gbs, compute_ms(), memory_ms(), ms(), step_ms, step_ms / ms());
    return buf;
  }
};

// "AMD EPYC 9R14 (avx2 avx512f avx512_bf16)" from /proc/cpuinfo: what the kernels could choose from.
inline std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  std::string isa;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) isa += (isa.empty() ? "" : " ") + std::string(f);
  return model + " (" + isa + ")";
}

// Wall time of every epoch of a fit.
struct EpochTimer : Callback {
  Clock::time_point t0;
  std::vector<double> epoch_seconds;
  void on_epoch_begin(int, const Logs&) override { t0 = Clock::now(); }
  void on_epoch_end(int, const Logs&) override { epoch_seconds.push_back(seconds(t0, Clock::now())); }
};

}  // namespace tk::bench
