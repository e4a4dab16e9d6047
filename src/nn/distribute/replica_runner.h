// One thread per replica, kept for the life of the strategy (OpenMP keeps a team per thread: threads made per
// step would start new teams every step). Replica 0 runs on the caller's thread.
//
//   ReplicaRunner runner(3);
//   runner.run(3, /*threads_each=*/1, [&](int r) { programs[r]->run(ctx[r]); }, &collective);
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "nn/distribute/local_collective.h"

namespace tk::nn::distribute {

class ReplicaRunner {
 public:
  explicit ReplicaRunner(int replicas);
  ~ReplicaRunner();
  ReplicaRunner(const ReplicaRunner&) = delete;
  ReplicaRunner& operator=(const ReplicaRunner&) = delete;

  // Runs fn(r) for r in [0, active) concurrently, each replica's kernels on `threads_each` threads. Returns when
  // all are done. When one throws, the collective is aborted (the others stop waiting for it) and the first
  // failure, in replica order, is rethrown; a CollectiveError caused by another replica's failure never hides it.
  void run(int active, int threads_each, const std::function<void(int)>& fn, LocalCollective* collective);

 private:
  void work(int replica);

  std::vector<std::thread> workers_;  // replicas 1..n-1
  std::mutex m_;
  std::condition_variable start_, finished_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0, threads_each_ = 1, running_ = 0;
  const std::function<void(int)>* fn_ = nullptr;
  LocalCollective* collective_ = nullptr;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace tk::nn::distribute
