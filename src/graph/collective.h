// The interface an AllReduce op's kernel calls: a group of replicas that reduce together. The strategy that
// runs the replicas owns it (nn/distribute/): in one process over devices, or over processes on MPI.
//
//   // replica r's program, after its gradient g (n floats) is ready:
//   collective->all_reduce(r, g, out, n, weight_r, "dense/kernel/all_reduce", k);
//   // every replica's out now holds sum over replicas of weight * g, bit for bit the same everywhere
#pragma once
#include <cstdint>
#include <string>

#include "trainkit/core/error.h"

namespace tk::graph {

class Collective {
 public:
  virtual ~Collective() = default;
  // Blocks until every replica taking part in this step has called it with the same `sequence` (the
  // collective's index in the program) and `n`, then writes sum_r weight_r * in_r (summed in replica
  // order, so every replica gets the same bits) to each replica's `out`. `in` is not changed and may be
  // reused by its owner once this returns. Throws (on every replica) when the replicas disagree, when one
  // of them failed, or when no progress is made within the group's timeout; the message names the
  // collective (`what`) and the replicas that did not arrive. `in` may be `out` (a bucket is reduced in place).
  virtual void all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                          int64_t sequence) = 0;
  // A device backend's AllReduce: in, out and weight (this replica's share, in device memory: the step's scalars)
  // live on the replica's device; the collective is queued on `stream` (a cudaStream_t) and this returns without
  // waiting, as a kernel launch does. The same sum and the same bits everywhere as all_reduce. Groups that reduce
  // in host memory (in one process, or on MPI) throw Unsupported.
  virtual void all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight, void* stream,
                                const char* what, int64_t sequence);

  // Overlap (an AllReduce with attrs.overlap and its AllReduceWait, graph/bucket.h): start_all_reduce begins the same
  // reduction and returns while it progresses; finish_all_reduce(replica, sequence) returns once `out` holds the sum.
  // `in` is consumed before start returns (the program may clear or reuse it at once: a micro-batching accumulator
  // is cleared right after); `out` is not touched by the caller until finish returns. Between the two the caller
  // runs other work (the rest of the backward pass).
  // Collectives started in one order are finished in the same order. By default (a group that cannot progress on
  // its own) start does the whole reduction and finish returns at once.
  virtual void start_all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                                int64_t sequence) {
    all_reduce(replica, in, out, n, weight, what, sequence);
  }
  virtual void finish_all_reduce(int /*replica*/, int64_t /*sequence*/) {}
  // The same pair for a device backend (an AllReduce with attrs.overlap on CUDA and its AllReduceWait): start queues
  // the reduction after the work queued on `stream` so far and returns; other work queued on `stream` meanwhile runs
  // beside it (NCCL: on a communication stream of its own). finish makes `stream`'s later work wait for the sum
  // (queued: the host does not wait). `in` may be reused by work queued on `stream` after start. By default start is
  // all_reduce_async (already ordered on `stream`) and finish does nothing.
  virtual void start_all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight,
                                      void* stream, const char* what, int64_t sequence) {
    all_reduce_async(replica, in, out, n, weight, stream, what, sequence);
  }
  virtual void finish_all_reduce_async(int /*replica*/, int64_t /*sequence*/, void* /*stream*/) {}
  // Called by the program between kernels while a started all-reduce is in flight: a chance to move it on (MPI
  // progresses a nonblocking collective only inside MPI calls). Cheap when there is nothing to do.
  virtual void progress() {}

  // Seconds replica 0 (on MPI: this process) has spent inside all_reduce since the group was made: waiting for the
  // others, moving and summing. Read on replica 0's thread between steps (fit's epoch line shows it per step).
  double seconds() const { return seconds_; }
  // Of those, started collectives: the wall time while any was in flight (from a start with none pending to the
  // finish that leaves none) and the time blocked in them meanwhile; the rest of the span ran other work.
  double overlapped_span_seconds() const { return span_seconds_; }
  double overlapped_blocked_seconds() const { return blocked_seconds_; }

 protected:
  double seconds_ = 0;                             // added to by replica 0's calls only
  double span_seconds_ = 0, blocked_seconds_ = 0;  // started collectives only (replica 0's)
};

inline void Collective::all_reduce_async(int, const float*, float*, int64_t, const float*, void*, const char* what,
                                         int64_t) {
  throw Unsupported(std::string("all-reduce '") + what +
                    "': this replicas' group reduces in host memory; a device program needs NCCL");
}

}  // namespace tk::graph
