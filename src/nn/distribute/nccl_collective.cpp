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

// One replica: its communicator and device, and what its last queued collective was.
struct Replica {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaEvent_t done = nullptr;  // recorded after the last collective on its stream
  bool pending = false;
  Clock::time_point since;  // when the oldest collective still pending was queued
  std::string what;
  int64_t sequence = -1;
};

struct NcclCollective::State {
  std::vector<Replica> replicas;
  std::chrono::milliseconds timeout{300000};
  std::mutex m;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread watchdog;

  // Every 100 ms: a replica whose last collective is not done within the timeout, or a communicator with an
  // asynchronous error, ends the process: the other replicas (threads or processes) would otherwise wait forever.
  void watch() {
    std::unique_lock lock(m);
    while (!stop_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping; })) {
      for (Replica& r : replicas) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(r.comm, &async);
        std::string why;
        if (async != ncclSuccess && async != ncclInProgress) {
          why = std::string("NCCL error ") + ncclGetErrorString(async);
        } else if (r.pending) {
          cudaSetDevice(r.device);
          const cudaError_t q = cudaEventQuery(r.done);
          if (q == cudaSuccess) {
            r.pending = false;
          } else if (q != cudaErrorNotReady) {
            why = std::string("CUDA error ") + cudaGetErrorString(q);
          } else if (Clock::now() - r.since > timeout) {
            why = "made no progress for " + std::to_string(timeout.count() / 1000) +
                  " s (TK_COLLECTIVE_TIMEOUT; another replica may have stopped or died)";
          }
        }
        if (why.empty()) continue;
        std::fprintf(stderr, "trainkit: NCCL all-reduce '%s' (collective %lld) on cuda:%d: %s. Ending this process.\n",
                     r.what.c_str(), static_cast<long long>(r.sequence), r.device, why.c_str());
        std::fflush(stderr);
        for (Replica& any : replicas) ncclCommAbort(any.comm);
        std::_Exit(70);
      }
    }
  }

  void start() {
    for (Replica& r : replicas) {
      check_cuda(cudaSetDevice(r.device), "cudaSetDevice", "NCCL replica on cuda:" + std::to_string(r.device));
      check_cuda(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming), "cudaEventCreate", "NCCL watchdog");
    }
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
      if (r.done) cudaEventDestroy(r.done);
      if (r.comm) ncclCommDestroy(r.comm);
    }
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
  check_cuda(cudaEventRecord(r.done, s), "cudaEventRecord", where);
  {
    std::lock_guard lock(s_->m);
    if (!r.pending) r.since = t0;
    r.pending = true;
    r.what = what;
    r.sequence = sequence;
  }
  if (replica == 0) seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();  // queueing only
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
