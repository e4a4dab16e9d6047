// Gradient all-reduce between replicas on CUDA devices through NCCL (graph/collective.h): one communicator per
// replica, in one process (MirroredStrategy over cuda devices, ncclCommInitAll) or one per process
// (MultiWorkerMirroredStrategy: rank 0's ncclUniqueId sent to the others over MPI). Built when the CUDA toolkit
// has NCCL (TK_HAVE_NCCL). The strategies make it when their replicas are on CUDA devices (strategy.cpp; never run
// between two GPUs yet: docs/distributed.md).
//
//   auto nccl = NcclCollective::for_devices({0, 1}, std::chrono::seconds(300));
//   // from replica r's AllReduce kernel, on its device's stream:
//   nccl->all_reduce_async(r, grad, out, n, device_weight, stream, "dense/kernel/all_reduce", 3);
//
// Each call sums weight_r * in_r over the replicas (NCCL's PreMulSum with the weight read on the device, so the
// step's share of the global batch is never baked into a launch) and queues it without waiting, on the replica's
// communication stream (non-blocking, highest priority), ordered after the compute stream's work by an event; the
// compute stream waits for the sum's event at once (all_reduce_async) or at the bucket's AllReduceWait
// (start/finish_all_reduce_async: overlap). The events' bookkeeping is comm_event_ring.h; each collective's NCCL time
// (start -> end events on the comm stream) is read one call later and reported as seconds(). NCCL never hangs
// silently here: a watchdog thread follows every replica's last collective, and one that is not done within the
// timeout, or a communicator error, aborts the communicators and ends the process (exit 70) with one line naming
// the collective, its number and the device — as MpiCollective does on MPI.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "graph/collective.h"

namespace tk::nn::distribute {

class NcclCollective final : public graph::Collective {
 public:
  // One process, replica r on CUDA device devices[r].
  static std::unique_ptr<NcclCollective> for_devices(const std::vector<int>& devices,
                                                     std::chrono::milliseconds timeout);
  // A new communicator id (rank 0 makes it and sends its bytes to the other ranks).
  static std::string unique_id();
  // This process is `rank` of `ranks`, its replica on CUDA device `device`; `id` from unique_id() on rank 0.
  static std::unique_ptr<NcclCollective> for_rank(const std::string& id, int ranks, int rank, int device,
                                                  std::chrono::milliseconds timeout);
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  // Blocking for `stream`: its later work waits for the sum (synchronized BatchNormalization's phases, buckets
  // without overlap).
  void all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight, void* stream,
                        const char* what, int64_t sequence) override;
  // Overlap: `stream` runs on while the comm stream reduces; finish makes it wait, at the bucket's AllReduceWait.
  void start_all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight, void* stream,
                              const char* what, int64_t sequence) override;
  void finish_all_reduce_async(int replica, int64_t sequence, void* stream) override;
  // Host-driven use (tests, tools): the same collective with a host weight, waited for.
  void all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                  int64_t sequence) override;

  struct State;  // nccl_collective.cpp

 private:
  explicit NcclCollective(std::unique_ptr<State> state);
  void queue(int replica, const float* in, float* out, int64_t n, const float* weight, void* stream, const char* what,
             int64_t sequence, bool started);
  std::unique_ptr<State> s_;
};

}  // namespace tk::nn::distribute
