#include "nn/distribute/replica_runner.h"

#include "graph/host_threads.h"
#include "trainkit/core/error.h"

namespace tk::nn::distribute {
namespace {

// Runs fn(replica); on a failure, aborts the collective (the other replicas stop waiting) and returns the exception.
std::exception_ptr run_replica(const std::function<void(int)>& fn, int replica, LocalCollective* collective) {
  try {
    fn(replica);
  } catch (const std::exception& e) {
    std::exception_ptr error = std::current_exception();
    if (collective) collective->abort("replica " + std::to_string(replica) + " failed: " + e.what());
    return error;
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    if (collective) collective->abort("replica " + std::to_string(replica) + " failed");
    return error;
  }
  return nullptr;
}

}  // namespace

ReplicaRunner::ReplicaRunner(int replicas) : errors_(static_cast<size_t>(replicas > 0 ? replicas : 1)) {
  for (int r = 1; r < replicas; ++r) workers_.emplace_back([this, r] { work(r); });
}

ReplicaRunner::~ReplicaRunner() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ReplicaRunner::work(int replica) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    LocalCollective* collective;
    {
      std::unique_lock<std::mutex> lock(m_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (replica >= active_) continue;
      fn = fn_;
      collective = collective_;
      graph::share_host_threads(threads_each_);
    }
    const std::exception_ptr error = run_replica(*fn, replica, collective);
    std::lock_guard<std::mutex> lock(m_);
    errors_[static_cast<size_t>(replica)] = error;
    if (--running_ == 0) finished_.notify_all();
  }
}

void ReplicaRunner::run(int active, int threads_each, const std::function<void(int)>& fn, LocalCollective* collective) {
  const int n = static_cast<int>(workers_.size()) + 1;
  if (active < 1 || active > n)
    throw InvalidArgument("ReplicaRunner: " + std::to_string(active) + " replicas asked of " + std::to_string(n));
  {
    std::lock_guard<std::mutex> lock(m_);
    active_ = active;
    threads_each_ = threads_each;
    fn_ = &fn;
    collective_ = collective;
    running_ = active - 1;
    for (std::exception_ptr& e : errors_) e = nullptr;
    ++generation_;
  }
  start_.notify_all();
  graph::share_host_threads(threads_each);
  const std::exception_ptr own = run_replica(fn, 0, collective);
  graph::share_host_threads(0);
  std::unique_lock<std::mutex> lock(m_);
  finished_.wait(lock, [&] { return running_ == 0; });
  errors_[0] = own;
  // The first failure that is not only another replica's abort echoed back.
  std::exception_ptr first;
  for (const std::exception_ptr& e : errors_) {
    if (!e) continue;
    if (!first) first = e;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveError&) {
    } catch (...) {
      first = e;
      break;
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace tk::nn::distribute
