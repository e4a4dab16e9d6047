#include "nn/distribute/local_collective.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "trainkit/core/error.h"

namespace tk::nn::distribute {
namespace {
std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", static_cast<double>(t.count()) / 1000.0);
  return buf;
}
}  // namespace

LocalCollective::LocalCollective(int replicas, std::chrono::milliseconds timeout)
    : timeout_(timeout),
      slots_(static_cast<size_t>(std::max(1, replicas))),
      arrived_at_(static_cast<size_t>(std::max(1, replicas)), 0),
      participants_(std::max(1, replicas)) {}

void LocalCollective::begin_step(int participants) {
  std::lock_guard<std::mutex> lock(m_);
  participants_ = std::clamp(participants, 1, static_cast<int>(slots_.size()));
  arrived_ = 0;
  std::fill(arrived_at_.begin(), arrived_at_.end(), 0);
  failed_ = false;
  failure_.clear();
}

void LocalCollective::mark_failed_locked(const std::string& why) {
  if (!std::exchange(failed_, true)) failure_ = why;  // the first failure is the one reported
  cv_.notify_all();
}

void LocalCollective::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(m_);
  mark_failed_locked(why);
}

void LocalCollective::fail_locked(const std::string& why) {
  mark_failed_locked(why);
  throw CollectiveError(failure_);
}

void LocalCollective::barrier(int replica, const char* what, const char* phase) {
  std::unique_lock<std::mutex> lock(m_);
  if (failed_) throw CollectiveError(failure_);
  const uint64_t generation = generation_;
  arrived_at_[static_cast<size_t>(replica)] = 1;
  if (++arrived_ == participants_) {
    arrived_ = 0;
    std::fill(arrived_at_.begin(), arrived_at_.end(), 0);
    ++generation_;
    cv_.notify_all();
    return;
  }
  const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || failed_; });
  if (failed_) throw CollectiveError(failure_);
  if (!done) {  // also printed now: if the missing replica never returns, fit cannot return this error
    std::string missing;
    for (int r = 0; r < participants_; ++r)
      if (!arrived_at_[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    const std::string why =
        ("all-reduce '" + std::string(what) + "' (" + phase + "): replica " + std::to_string(replica) + " waited " +
         seconds_text(timeout_) + " s for replica(s) " + missing +
         ", which never arrived (a replica is stuck or much slower; raise the collective timeout, "
         "TK_COLLECTIVE_TIMEOUT seconds, if the step is legitimately that slow)");
    std::fprintf(stderr, "trainkit: %s\n", why.c_str());
    fail_locked(why);
  }
}

void LocalCollective::all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                                 int64_t sequence) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Timed {  // replica 0's time in the collective, however it ends
    double* total;
    std::chrono::steady_clock::time_point t0;
    ~Timed() {
      if (total) *total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } timed{replica == 0 ? &seconds_ : nullptr, t0};
  int participants;
  {
    std::lock_guard<std::mutex> lock(m_);
    participants = participants_;
    if (replica < 0 || replica >= participants)
      fail_locked("all-reduce '" + std::string(what) + "': replica " + std::to_string(replica) + " is not one of the " +
                  std::to_string(participants) + " taking part in this step");
    slots_[static_cast<size_t>(replica)] = Arrival{in, out, n, sequence, weight, what};
  }
  if (participants == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * weight;
    if (replica == 0) ++collectives_;
    return;
  }
  barrier(replica, what, "gathering");
  // Every replica sees the same slots: all detect a disagreement, and all throw the same error.
  for (int r = 0; r < participants; ++r) {
    const Arrival& a = slots_[static_cast<size_t>(r)];
    if (a.sequence != sequence || a.n != n) {
      std::lock_guard<std::mutex> lock(m_);
      fail_locked("all-reduce mismatch: replica " + std::to_string(replica) + " is at collective " +
                  std::to_string(sequence) + " '" + what + "' (" + std::to_string(n) + " values), replica " +
                  std::to_string(r) + " at collective " + std::to_string(a.sequence) + " '" + a.what + "' (" +
                  std::to_string(a.n) +
                  " values): the replicas' programs differ (the same model must run on "
                  "every replica)");
    }
  }
  // This replica's slice, summed over the replicas in order, in blocks that stay in L1.
  const int64_t begin = n * replica / participants, end = n * (replica + 1) / participants;
  constexpr int64_t kBlock = 1024;
  float sum[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t len = std::min(kBlock, end - b);
    const Arrival& first = slots_[0];
    for (int64_t i = 0; i < len; ++i) sum[i] = first.in[b + i] * first.weight;
    for (int r = 1; r < participants; ++r) {
      const Arrival& a = slots_[static_cast<size_t>(r)];
      for (int64_t i = 0; i < len; ++i) sum[i] += a.in[b + i] * a.weight;
    }
    for (int r = 0; r < participants; ++r)
      std::memcpy(slots_[static_cast<size_t>(r)].out + b, sum, sizeof(float) * static_cast<size_t>(len));
  }
  barrier(replica, what, "reducing");  // no replica reuses its input or reads its output before all are done
  if (replica == 0) ++collectives_;
}

}  // namespace tk::nn::distribute
