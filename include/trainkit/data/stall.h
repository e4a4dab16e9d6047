// Stall accounting: how long a training loop waited for input versus computed, with TensorFlow
// profiler's verdict and advice that names the slowest pipeline stage. fit() does this for every Dataset.
//
//   tk::data::StallMeter meter;
//   for (...) {
//     auto t0 = clock::now();  it.next(batch);  meter.add_wait(seconds since t0);
//     ... step ...                               meter.add_compute(step seconds);
//   }
//   tk::data::StallReport r = meter.report(it.stats());
//   // r.verdict: "not input-bound" (< 5% waiting), "moderately input-bound" (5-20%), "highly input-bound"
//   // r.advice:  "slowest stage: map(augment) at 2.10 ms/element on 2 of 8 threads: raise num_parallel_calls ..."
#pragma once
#include <string>
#include <vector>

#include "trainkit/data/dataset.h"

namespace tk::data {

struct StallReport {
  int64_t steps = 0;
  double wait_seconds = 0;     // in Iterator::next
  double compute_seconds = 0;  // in the training step
  double wait_fraction = 0;    // wait / (wait + compute)
  double p50_wait_ms = 0, p99_wait_ms = 0;
  std::string verdict;          // "not input-bound" | "moderately input-bound" | "highly input-bound"
  std::string advice;           // empty when not input-bound
  std::string slowest_stage;    // the stage the advice names
  std::string summary() const;  // "input wait 3.1% (p50 0.01 ms, p99 0.20 ms): not input-bound"
};

class StallMeter {
 public:
  void add_wait(double seconds);
  void add_compute(double seconds);
  StallReport report(const std::vector<StageStats>& stages) const;
  void reset();

 private:
  std::vector<double> waits_;
  double wait_ = 0, compute_ = 0;
};

// The TF profiler's thresholds: < 5% not input-bound, 5-20% moderately, >= 20% highly.
std::string stall_verdict(double wait_fraction);
// Names the slowest stage (work per element over its threads) and what to change; empty when not input-bound.
std::string stall_advice(const std::vector<StageStats>& stages, double wait_fraction);

}  // namespace tk::data
