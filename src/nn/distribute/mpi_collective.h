// Data parallel across processes and machines on MPI (MultiWorkerMirroredStrategy): one replica per process, rank
// and size from MPI itself, so the same binary runs under mpirun, mpiexec or a cluster scheduler's launcher.
//
//   auto& world = MpiCollective::world(timeout);   // MPI_Init_thread on first use; MPI_Finalize at exit
//   world.all_reduce(0, grad, out, n, rows / global_rows, "dense/kernel/all_reduce", k);
//   world.broadcast(weights, bytes, "weights");    // rank 0's bytes everywhere
//
// Collectives never hang silently: a watchdog thread ends this rank (exit 70) when a collective has made no progress
// within the timeout, printing which rank gave up on which collective; the launcher then ends every rank (a stopped
// or dead rank cannot answer). Built without MPI, world() throws Unsupported.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "graph/collective.h"

namespace tk::nn::distribute {

class MpiCollective final : public graph::Collective {
 public:
  // The process's MPI world (started on first use). The timeout of the first call holds.
  static MpiCollective& world(std::chrono::milliseconds timeout);
  // Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
  static bool launched_by_mpi();
  // When MPI runs with more than one rank: ends every rank with `exit_code` (MPI_Abort) after a grace second, in
  // which ranks that failed at the same point print their own errors. Otherwise returns. For an error this rank
  // cannot go on from: the others would wait in their next collective until the timeout, and MPI_Finalize waits too.
  static void end_job_after_error(int exit_code);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This rank's number among the ranks on its node (MPI_COMM_TYPE_SHARED), -1 when MPI could not say.
  int local_rank() const { return local_rank_; }
  // Sum over ranks of weight * in, the same bits on every rank (two ranks: an allreduce; more: reduced once at
  // rank 0, then broadcast).
  void all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                  int64_t sequence) override;
  // Nonblocking: two ranks an MPI_Iallreduce; more an MPI_Ireduce to rank 0, broadcast in finish (the same bits as
  // all_reduce). Up to kMaxPending in flight; finished in the order started.
  void start_all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                        int64_t sequence) override;
  void finish_all_reduce(int replica, int64_t sequence) override;
  void progress() override;  // MPI_Test on the started collectives
  // data[i] = the sum over ranks of data[i], in place, the same bits on every rank (as all_reduce): the logs of a
  // distributed evaluation (row-weighted sums and row counts, in double).
  void all_reduce_sum(double* data, int64_t n, const char* what);
  // In place, on every rank: rank r's counts[r] items of `item_bytes` bytes each, which it holds at item
  // counts[0] + ... + counts[r - 1] of `data` (MPI_Allgatherv): predict's rows of the batches each rank ran.
  // InvalidArgument when the items of one call pass an int.
  void all_gather(void* data, const std::vector<int64_t>& counts, size_t item_bytes, const char* what);
  // Rank 0's `bytes` at `data` on every rank.
  void broadcast(void* data, size_t bytes, const char* what);
  uint64_t broadcast(uint64_t value, const char* what);
  // Prints "trainkit: rank R of N failed: <why>" and ends every rank (MPI_Abort, from the training thread): for a
  // failure on one rank, which the others would otherwise wait for until the timeout.
  [[noreturn]] void abort(const std::string& why);
  // InvalidArgument on every rank, naming the ranks whose `fingerprint` differs from rank 0's (its text in
  // `describe` for rank 0's side), before anything that would otherwise deadlock. `remedy`: what the user must make
  // equal (null: the model and the batch size).
  void check_same(const std::string& fingerprint, const char* what, const char* remedy = nullptr);

 private:
  explicit MpiCollective(std::chrono::milliseconds timeout);
  // Marks a blocking collective in flight for the watchdog (watch(), on its own thread).
  class InFlight {
   public:
    InFlight(MpiCollective& c, const char* what, int64_t sequence);
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    MpiCollective& c_;
  };
  void watch();
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1, local_rank_ = -1;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool in_flight_ = false;
  std::string what_;
  int64_t sequence_ = 0;
  std::chrono::steady_clock::time_point since_;
  // Started collectives (start_all_reduce), oldest first; fixed storage so a step allocates nothing.
  static constexpr int kMaxPending = 64;
  struct Pending {
    int64_t sequence = -1;
    float* out = nullptr;
    int64_t n = 0;
    const char* what = "";
    alignas(8) unsigned char request[64];  // an MPI_Request (an int or a pointer, by implementation)
  };
  Pending pending_[kMaxPending];
  int pending_count_ = 0;
  std::chrono::steady_clock::time_point in_flight_since_;  // when the first of the pending ones started
};

}  // namespace tk::nn::distribute
