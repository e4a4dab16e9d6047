// NcclCollective (nccl_collective.h): NCCL communicators, PreMulSum all-reduces queued on the replicas' streams, and
// the watchdog that turns a stuck collective into one clear error instead of a hang.
#include "nn/distribute/nccl_collective.h"

#ifdef TK_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "trainkit/core/error.h"

namespace tk::nn::distribute {
namespace {

using Clock = std::chrono::steady_clock;

void check_nccl(ncclResult_t r, const char* call, const std::string& where) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw Error(std::string(call) + " failed: " + ncclGetErrorString(r) + " (" + where + "; NCCL_DEBUG=INFO says more)");
}
void check_cuda(cudaError_t e, const char* call, const std::string& where) {
  if (e == cudaSuccess) return;
  throw Error(std::string(call) + " failed: " + cudaGetErrorString(e) + " (" + where + ")");
}

}  // namespace

// A collective queued on a replica's stream and not yet seen done: the event recorded after it, and what it was.
struct InFlight {
  cudaEvent_t done = nullptr;
  Clock::time_point queued;
  std::string what;
  int64_t sequence = -1;
};

// One replica: its communicator and device, and its collectives in flight, oldest first. The watchdog times the
// oldest unfinished one: the host queues ahead of the GPU, so the newest may never be seen finished between two.
struct Replica {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::deque<InFlight> in_flight;
  std::vector<cudaEvent_t> spare;  // finished collectives' events, reused
};

struct NcclCollective::State {
  std::vector<Replica> replicas;
  std::chrono::milliseconds timeout{300000};
  std::mutex m;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread watchdog;

  // Every 100 ms: a replica whose oldest collective in flight is not done within the timeout, or a communicator
  // with an asynchronous error, ends the process: the other replicas (threads or processes) would otherwise wait
  // forever.
  void watch() {
    std::unique_lock lock(m);
    while (!stop_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping; })) {
      for (Replica& r : replicas) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(r.comm, &async);
        std::string why;
        const InFlight* stuck = nullptr;
        if (async != ncclSuccess && async != ncclInProgress) {
          why = std::string("NCCL error ") + ncclGetErrorString(async);
        } else {
          cudaSetDevice(r.device);
          while (!r.in_flight.empty()) {
            const InFlight& f = r.in_flight.front();
            const cudaError_t q = cudaEventQuery(f.done);
            if (q == cudaSuccess) {
              r.spare.push_back(f.done);
              r.in_flight.pop_front();
              continue;
            }
            if (q != cudaErrorNotReady)
              why = std::string("CUDA error ") + cudaGetErrorString(q);
            else if (Clock::now() - f.queued > timeout)
              why = "made no progress for " + std::to_string(timeout.count() / 1000) +
                    " s (TK_COLLECTIVE_TIMEOUT; another replica may have stopped or died)";
            if (!why.empty()) stuck = &f;
            break;
          }
        }
        if (why.empty()) continue;
        std::fprintf(stderr, "trainkit: NCCL all-reduce '%s' (collective %lld) on cuda:%d: %s. Ending this process.\n",
                     stuck ? stuck->what.c_str() : "?", static_cast<long long>(stuck ? stuck->sequence : -1), r.device,
                     why.c_str());
        std::fflush(stderr);
        for (Replica& any : replicas) ncclCommAbort(any.comm);
        std::_Exit(70);
      }
    }
  }

  void start() {
    watchdog = std::thread([this] { watch(); });
  }

  ~State() {
    {
      std::lock_guard lock(m);
      stopping = true;
    }
    stop_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    for (Replica& r : replicas) {
      cudaSetDevice(r.device);
      for (InFlight& f : r.in_flight) cudaEventDestroy(f.done);
      for (cudaEvent_t e : r.spare) cudaEventDestroy(e);
    }
    // Communicators end together: finalize (a collective among them) inside one group, then free each.
    ncclGroupStart();
    for (Replica& r : replicas)
      if (r.comm) ncclCommFinalize(r.comm);
    ncclGroupEnd();
    for (Replica& r : replicas)
      if (r.comm) ncclCommDestroy(r.comm);
  }
};

NcclCollective::NcclCollective(std::unique_ptr<State> state) : s_(std::move(state)) {}
NcclCollective::~NcclCollective() = default;

std::unique_ptr<NcclCollective> NcclCollective::for_devices(const std::vector<int>& devices,
                                                            std::chrono::milliseconds timeout) {
  auto s = std::make_unique<State>();
  s->timeout = timeout;
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll",
             std::to_string(devices.size()) + " devices in one process");
  for (size_t r = 0; r < devices.size(); ++r) {
    Replica& rep = s->replicas.emplace_back();
    rep.comm = comms[r];
    rep.device = devices[r];
  }
  s->start();
  return std::unique_ptr<NcclCollective>(new NcclCollective(std::move(s)));
}

std::string NcclCollective::unique_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", "rank 0");
  return std::string(id.internal, sizeof id.internal);
}

std::unique_ptr<NcclCollective> NcclCollective::for_rank(const std::string& id, int ranks, int rank, int device,
                                                         std::chrono::milliseconds timeout) {
  ncclUniqueId uid;
  if (id.size() != sizeof uid.internal)
    throw InvalidArgument("NCCL: a communicator id has " + std::to_string(sizeof uid.internal) + " bytes, got " +
                          std::to_string(id.size()));
  std::memcpy(uid.internal, id.data(), sizeof uid.internal);
  auto s = std::make_unique<State>();
  s->timeout = timeout;
  check_cuda(cudaSetDevice(device), "cudaSetDevice", "rank " + std::to_string(rank));
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, ranks, uid, rank), "ncclCommInitRank",
             "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " on cuda:" + std::to_string(device));
  Replica& rep = s->replicas.emplace_back();
  rep.comm = comm;
  rep.device = device;
  s->start();
  return std::unique_ptr<NcclCollective>(new NcclCollective(std::move(s)));
}

void NcclCollective::all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight,
                                      void* stream, const char* what, int64_t sequence) {
  const auto t0 = Clock::now();
  Replica& r = s_->replicas.at(static_cast<size_t>(replica));
  const std::string where = std::string("all-reduce '") + what + "' on cuda:" + std::to_string(r.device);
  ncclRedOp_t op;  // sum over replicas of weight_r * in_r, the weight read on the device when the collective runs
  check_nccl(ncclRedOpCreatePreMulSum(&op, const_cast<float*>(weight), ncclFloat32, ncclScalarDevice, r.comm),
             "ncclRedOpCreatePreMulSum", where);
  const auto s = static_cast<cudaStream_t>(stream);
  const ncclResult_t res = ncclAllReduce(in, out, static_cast<size_t>(n), ncclFloat32, op, r.comm, s);
  ncclRedOpDestroy(op, r.comm);  // allowed once the collective is queued
  check_nccl(res, "ncclAllReduce", where);
  {
    std::lock_guard lock(s_->m);
    InFlight f{nullptr, t0, what, sequence};
    if (!r.spare.empty()) {
      f.done = r.spare.back();
      r.spare.pop_back();
    } else {
      check_cuda(cudaEventCreateWithFlags(&f.done, cudaEventDisableTiming), "cudaEventCreate", where);
    }
    check_cuda(cudaEventRecord(f.done, s), "cudaEventRecord", where);
    r.in_flight.push_back(std::move(f));
  }
  // Queueing time only: the collective itself runs later on the stream (the epoch line's figure is a lower bound
  // under NCCL until it is timed with events).
  if (replica == 0) seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

void NcclCollective::all_reduce(int replica, const float* in, float* out, int64_t n, float weight, const char* what,
                                int64_t sequence) {
  Replica& r = s_->replicas.at(static_cast<size_t>(replica));
  const std::string where = std::string("all-reduce '") + what + "' on cuda:" + std::to_string(r.device);
  check_cuda(cudaSetDevice(r.device), "cudaSetDevice", where);
  float* w = nullptr;  // the weight in device memory, as a program's scalars hold it
  check_cuda(cudaMalloc(&w, sizeof(float)), "cudaMalloc", where);
  cudaStream_t s = nullptr;
  try {
    check_cuda(cudaStreamCreate(&s), "cudaStreamCreate", where);
    check_cuda(cudaMemcpyAsync(w, &weight, sizeof weight, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync", where);
    all_reduce_async(replica, in, out, n, w, s, what, sequence);
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize", where);
  } catch (...) {
    if (s) cudaStreamDestroy(s);
    cudaFree(w);
    throw;
  }
  cudaStreamDestroy(s);
  cudaFree(w);
}

}  // namespace tk::nn::distribute
#endif
