// Stall accounting and advice (include/trainkit/data/stall.h).
#include "trainkit/data/stall.h"

#include <algorithm>
#include <cstdio>

namespace tk::data {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const auto k = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

void StallMeter::add_wait(double s) {
  waits_.push_back(s);
  wait_ += s;
}
void StallMeter::add_compute(double s) { compute_ += s; }
void StallMeter::reset() {
  waits_.clear();
  wait_ = compute_ = 0;
}

StallReport StallMeter::report(const std::vector<StageStats>& stages) const {
  StallReport r;
  r.steps = static_cast<int64_t>(waits_.size());
  r.wait_seconds = wait_;
  r.compute_seconds = compute_;
  r.wait_fraction = wait_ + compute_ > 0 ? wait_ / (wait_ + compute_) : 0;
  r.p50_wait_ms = quantile(waits_, 0.5) * 1e3;
  r.p99_wait_ms = quantile(waits_, 0.99) * 1e3;
  r.verdict = stall_verdict(r.wait_fraction);
  r.advice = stall_advice(stages, r.wait_fraction);
  const size_t at = r.advice.find("slowest stage: ");
  if (at != std::string::npos) {
    const size_t begin = at + 15;
    r.slowest_stage = r.advice.substr(begin, r.advice.find(" at ", begin) - begin);
  }
  return r;
}

std::string StallReport::summary() const {
  return fmt("input wait %.1f%%", wait_fraction * 100) + fmt(" (p50 %.2f ms", p50_wait_ms) +
         fmt(", p99 %.2f ms): ", p99_wait_ms) + verdict;
}

std::string stall_verdict(double f) {
  if (f < 0.05) return "not input-bound";
  if (f < 0.20) return "moderately input-bound";
  return "highly input-bound";
}

std::string stall_advice(const std::vector<StageStats>& stages, double wait_fraction) {
  if (wait_fraction < 0.05 || stages.empty()) return {};
  // Cost of a stage = its work per element spread over its threads, times its elements: the stage whose
  // threads were busiest is the one to fix.
  const StageStats* worst = nullptr;
  double worst_busy = -1;
  bool has_prefetch = false;
  for (const StageStats& s : stages) {
    if (s.kind == "prefetch") has_prefetch = true;
    const double busy = s.work_seconds / std::max(1, s.parallelism);
    if (busy > worst_busy) {
      worst_busy = busy;
      worst = &s;
    }
  }
  std::string a;
  if (worst && worst->elements > 0) {
    const double per = worst->work_seconds / static_cast<double>(worst->elements) * 1e3;
    a = "slowest stage: " + worst->name + fmt(" at %.3f ms/element", per);
    if (worst->parallelism > 1 || worst->autotuned) a += " on " + std::to_string(worst->parallelism) + " threads";
    a += ": ";
    const bool is_map = worst->kind == "map";
    if (is_map && worst->autotuned)
      a += "AUTOTUNE already gives it " + std::to_string(worst->parallelism) +
           " threads; make the function cheaper, cache() its output if it does not change between epochs, or "
           "raise Options::cpu_budget";
    else if (is_map)
      a += "raise num_parallel_calls (now " + std::to_string(worst->parallelism) + ") or use AUTOTUNE";
    else if (worst->kind == "interleave")
      a += "read more files at once (interleave num_parallel_calls, cycle_length)";
    else if (worst->kind == "batch" || worst->kind == "shuffle" || worst->kind == "filter" ||
             worst->kind == "unbatch" || worst->kind == "cache" || worst->kind == "zip")
      a += "it runs on one thread: put a map with num_parallel_calls before it for per-element work, and "
           "prefetch(AUTOTUNE) after it";
    else
      a += "reading is the bottleneck: cache() after the reader if the data fits, interleave several files "
           "with num_parallel_calls, or convert to a faster format (NPY, HDF5)";
  }
  if (!has_prefetch) a += std::string(a.empty() ? "" : "; ") + "add prefetch(AUTOTUNE) at the end of the pipeline";
  return a;
}

}  // namespace tk::data
