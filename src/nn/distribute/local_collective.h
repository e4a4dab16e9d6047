// The replicas of one process reduce in shared memory: each replica reduces its own slice of every gradient over
// all replicas (in replica order) and writes the sum into every replica's output, so the work is split evenly
// and every replica ends with the same bits.
//
//   LocalCollective c(3, std::chrono::seconds(300));
//   c.begin_step(3);                       // before the replicas run (not while a collective is in flight)
//   // on replica r's thread, from its AllReduce ops:
//   c.all_reduce(r, grad, out, n, rows_r / rows, "dense/kernel/all_reduce", 0);
//   c.abort("replica 1: out of memory");  // a replica failed: the others throw instead of waiting forever
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "graph/collective.h"

namespace tk::nn::distribute {

class LocalCollective final : public graph::Collective {
 public:
  LocalCollective(int replicas, std::chrono::milliseconds timeout);
  // The replicas 0..participants-1 take part in this step's collectives (fewer than all when the last batch has
  // fewer rows than there are replicas). Clears an earlier abort.
  void begin_step(int participants);
  void all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                  int64_t sequence) override;
  // Makes every replica waiting in (or later entering) a collective of this step throw CollectiveError(why).
  void abort(const std::string& why);
  int64_t collectives() const { return collectives_; }  // completed all-reduces (replica 0's count)
  int participants() const { return participants_; }    // of the last begin_step (read between steps)

 private:
  struct Arrival {
    const float* in = nullptr;
    float* out = nullptr;
    int64_t n = 0, sequence = -1;
    float weight = 0.0f;
    const char* what = "";
  };
  // Waits until all participants have arrived (phase `phase` of `what`); throws when aborted or timed out.
  void barrier(int replica, const char* what, const char* phase);
  // Under m_: marks the collective failed (keeping the first reason) and wakes the waiting replicas.
  void mark_failed_locked(const std::string& why);
  [[noreturn]] void fail_locked(const std::string& why);

  std::chrono::milliseconds timeout_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Arrival> slots_;
  std::vector<char> arrived_at_;  // per replica: in the current barrier
  int participants_ = 1, arrived_ = 0;
  uint64_t generation_ = 0;
  bool failed_ = false;
  std::string failure_;
  int64_t collectives_ = 0;
};

}  // namespace tk::nn::distribute
