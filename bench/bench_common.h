// Shared by the throughput benchmarks: the sgemm roofline and an epoch timer.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "trainkit/nn/callbacks.h"

namespace tk::bench {

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

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

// Wall time of every epoch of a fit.
struct EpochTimer : Callback {
  Clock::time_point t0;
  std::vector<double> epoch_seconds;
  void on_epoch_begin(int, const Logs&) override { t0 = Clock::now(); }
  void on_epoch_end(int, const Logs&) override { epoch_seconds.push_back(seconds(t0, Clock::now())); }
};

}  // namespace tk::bench
