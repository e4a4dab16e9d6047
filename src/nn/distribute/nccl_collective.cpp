// NcclCollective (nccl_collective.h): NCCL communicators, PreMulSum all-reduces queued on the replicas' streams, and
// the watchdog that turns a stuck collective into one clear error instead of a hang.
#include "nn/distribute/nccl_collective.h"

#ifdef TK_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "nn/distribute/comm_drain.h"
#include "nn/distribute/comm_event_ring.h"
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

// Puts the calling thread's current device back as it was (opening replicas sets each one's device in turn).
class DeviceRestore {
 public:
  DeviceRestore() {
    if (cudaGetDevice(&device_) != cudaSuccess) device_ = -1;
  }
  ~DeviceRestore() {
    if (device_ >= 0) cudaSetDevice(device_);
  }
  DeviceRestore(const DeviceRestore&) = delete;
  DeviceRestore& operator=(const DeviceRestore&) = delete;

 private:
  int device_ = -1;
};

}  // namespace

// One replica's events, slot by slot (comm_event_ring.h): ready (untimed: it only orders), start, end, wait_begin and
// wait_end (timed: their differences are the NCCL time and the compute stream's wait).
struct ReplicaEvents final : CommEvents {
  static constexpr int kReady = 4;
  int device = 0;
  cudaStream_t comm = nullptr;
  std::vector<std::array<cudaEvent_t, 5>> slots;  // [start, end, wait_begin, wait_end, ready]

  std::string where() const { return "NCCL's communication stream on cuda:" + std::to_string(device); }
  cudaEvent_t at(int slot, CommMark m) { return slots[static_cast<size_t>(slot)][static_cast<size_t>(m)]; }
  int create_slot() override {
    std::array<cudaEvent_t, 5> e{};
    for (int i = 0; i < 5; ++i)
      check_cuda(cudaEventCreateWithFlags(&e[static_cast<size_t>(i)], i == kReady ? cudaEventDisableTiming : 0),
                 "cudaEventCreateWithFlags", where());
    slots.push_back(e);
    return static_cast<int>(slots.size()) - 1;
  }
  void comm_after_compute(int slot, void* compute) override {
    cudaEvent_t ready = slots[static_cast<size_t>(slot)][kReady];
    check_cuda(cudaEventRecord(ready, static_cast<cudaStream_t>(compute)), "cudaEventRecord (ready)", where());
    check_cuda(cudaStreamWaitEvent(comm, ready, 0), "cudaStreamWaitEvent (comm after compute)", where());
  }
  void record(int slot, CommMark m, void* compute) override {
    check_cuda(cudaEventRecord(at(slot, m), recorded_on_comm(m) ? comm : static_cast<cudaStream_t>(compute)),
               "cudaEventRecord", where());
  }
  void compute_after_end(int slot, void* compute) override {
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute), at(slot, CommMark::end), 0),
               "cudaStreamWaitEvent (compute after the all-reduce)", where());
  }
  bool complete(int slot, CommMark m) override { return cudaEventQuery(at(slot, m)) == cudaSuccess; }
  double elapsed_ms(int slot, CommMark from, CommMark to) override {
    float ms = 0;
    return cudaEventElapsedTime(&ms, at(slot, from), at(slot, to)) == cudaSuccess ? double(ms) : 0.0;
  }
  // `wait`: the comm stream drained (comm_drain.h); after an abort nothing waits (destroying an event or a stream with
  // work pending is allowed: CUDA frees them once it completes).
  void release(bool wait) noexcept {
    cudaSetDevice(device);
    if (comm && wait) cudaStreamSynchronize(comm);
    for (auto& e : slots)
      for (cudaEvent_t ev : e)
        if (ev) cudaEventDestroy(ev);
    slots.clear();
  }
};

// One replica: its communicator, device, communication stream and the ring of its collectives (oldest first).
struct Replica {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::unique_ptr<ReplicaEvents> events;
  std::unique_ptr<CommEventRing> ring;
  // Its comm stream: non-blocking (no implicit order with the legacy default stream the programs run on) and of the
  // highest priority, so that NCCL's kernels are scheduled ahead of the backward pass's when both are ready (PyTorch's
  // NCCL streams may be made so too): the reduction then finishes as early as it can.
  void open(ncclComm_t c, int d) {
    const DeviceRestore restore;  // the caller's current device is left as it was
    comm = c;
    device = d;
    events = std::make_unique<ReplicaEvents>();
    events->device = d;
    check_cuda(cudaSetDevice(d), "cudaSetDevice", events->where());
    int least = 0, greatest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange",
               events->where());
    check_cuda(cudaStreamCreateWithPriority(&events->comm, cudaStreamNonBlocking, greatest),
               "cudaStreamCreateWithPriority", events->where());
    ring = std::make_unique<CommEventRing>(*events);
  }
};

double now_seconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct NcclCollective::State {
  std::vector<Replica> replicas;
  std::chrono::milliseconds timeout{300000};
  std::mutex m;  // the rings: each replica's thread and the watchdog
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread watchdog;

  // Every 100 ms: a replica whose oldest unfinished collective is not done within the timeout, or a communicator
  // with an asynchronous error, ends the process: the other replicas (threads or processes) would otherwise wait
  // forever. It only queries events (the replicas' threads read the times and reuse the slots).
  void watch() {
    std::unique_lock lock(m);
    while (!stop_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping; })) {
      for (Replica& r : replicas) {
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(r.comm, &async);
        std::string why;
        const CommEventRing::Entry* stuck = nullptr;
        if (async != ncclSuccess && async != ncclInProgress) {
          why = std::string("NCCL error ") + ncclGetErrorString(async);
        } else {
          cudaSetDevice(r.device);
          stuck = r.ring->oldest_unfinished();
          if (stuck && now_seconds() - stuck->queued_s > std::chrono::duration<double>(timeout).count())
            why = "made no progress for " + std::to_string(timeout.count() / 1000) +
                  " s (TK_COLLECTIVE_TIMEOUT; another replica may have stopped or died)";
          else if (stuck) {
            const cudaError_t q = cudaEventQuery(r.events->at(stuck->slot, CommMark::end));
            if (q != cudaSuccess && q != cudaErrorNotReady) why = std::string("CUDA error ") + cudaGetErrorString(q);
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

  void stop_watchdog() {
    {
      std::lock_guard lock(m);
      stopping = true;
    }
    stop_cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
  }

  // The comm streams drained while the watchdog still runs (a collective stuck past the timeout still ends the
  // process with its line), polled for at most the timeout; then the watchdog stops. Drained: the communicators are
  // finalized together; else (a replica threw mid-step and never queued its part, a CUDA error) they are aborted, so
  // that the process never hangs silently at exit (comm_drain.h).
  ~State() {
    const DeviceRestore restore;
    const DrainOutcome drained = drain_streams(
        replicas.size(),
        [&](size_t i) {
          const Replica& r = replicas[i];
          if (!r.events || !r.events->comm) return StreamState::idle;
          cudaSetDevice(r.device);
          const cudaError_t q = cudaStreamQuery(r.events->comm);
          return q == cudaSuccess         ? StreamState::idle
                 : q == cudaErrorNotReady ? StreamState::busy
                                          : StreamState::failed;
        },
        std::chrono::duration<double>(timeout).count(), now_seconds,
        [] { std::this_thread::sleep_for(std::chrono::milliseconds(1)); });
    stop_watchdog();
    const bool finalize = finalize_after(drained);
    if (!finalize) {
      std::fprintf(stderr, "trainkit: NCCL's communication streams %s at teardown: aborting the communicators.\n",
                   drained == DrainOutcome::failed ? "reported a CUDA error" : "did not drain within the timeout");
      std::fflush(stderr);
      for (Replica& r : replicas)
        if (r.comm) ncclCommAbort(r.comm);  // frees it: no destroy after
    }
    for (Replica& r : replicas)
      if (r.events) r.events->release(finalize);  // no collective still records an event
    if (finalize) {
      // Communicators end together: finalize (a collective among them) inside one group, then free each.
      ncclGroupStart();
      for (Replica& r : replicas)
        if (r.comm) ncclCommFinalize(r.comm);
      ncclGroupEnd();
      for (Replica& r : replicas)
        if (r.comm) ncclCommDestroy(r.comm);
    }
    for (Replica& r : replicas)
      if (r.events && r.events->comm) {
        cudaSetDevice(r.device);
        cudaStreamDestroy(r.events->comm);
      }
  }
};

NcclCollective::NcclCollective(std::unique_ptr<State> state) : s_(std::move(state)) {}
NcclCollective::~NcclCollective() = default;

std::unique_ptr<NcclCollective> NcclCollective::for_devices(const std::vector<int>& devices,
                                                            std::chrono::milliseconds timeout) {
  const DeviceRestore restore;
  auto s = std::make_unique<State>();
  s->timeout = timeout;
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll",
             std::to_string(devices.size()) + " devices in one process");
  for (size_t r = 0; r < devices.size(); ++r) s->replicas.emplace_back().open(comms[r], devices[r]);
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
  s->replicas.emplace_back().open(comm, device);
  s->start();
  return std::unique_ptr<NcclCollective>(new NcclCollective(std::move(s)));
}

// Replica `replica`'s collective on its comm stream, ordered after the work queued on `stream` so far. `started`: its
// AllReduceWait makes `stream` wait (finish_all_reduce_async); else `stream` waits at once.
void NcclCollective::queue(int replica, const float* in, float* out, int64_t n, const float* weight, void* stream,
                           const char* what, int64_t sequence, bool started) {
  Replica& r = s_->replicas.at(static_cast<size_t>(replica));
  const std::string where = std::string("all-reduce '") + what + "' on cuda:" + std::to_string(r.device);
  CommTimes done;
  int slot = -1;
  {
    std::lock_guard lock(s_->m);
    done = r.ring->harvest();  // the collectives done by now (last step's): never waits
    slot = r.ring->before(sequence, what, started, stream, now_seconds());
  }
  if (replica == 0) {  // the epoch line's figures (graph/collective.h), one step late
    seconds_ += done.nccl_ms / 1e3;
    span_seconds_ += done.started_nccl_ms / 1e3;
    blocked_seconds_ += done.blocked_ms / 1e3;
  }
  ncclRedOp_t op;  // sum over replicas of weight_r * in_r, the weight read on the device when the collective runs
  ncclResult_t res = ncclRedOpCreatePreMulSum(&op, const_cast<float*>(weight), ncclFloat32, ncclScalarDevice, r.comm);
  const char* call = "ncclRedOpCreatePreMulSum";
  if (res == ncclSuccess || res == ncclInProgress) {
    res = ncclAllReduce(in, out, static_cast<size_t>(n), ncclFloat32, op, r.comm, r.events->comm);
    call = "ncclAllReduce";
    ncclRedOpDestroy(op, r.comm);  // allowed once the collective is queued
  }
  {
    std::lock_guard lock(s_->m);
    r.ring->after(slot, stream);  // the end event even when a call failed, so that no entry waits for a lost one
  }
  check_nccl(res, call, where);
}

void NcclCollective::all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight,
                                      void* stream, const char* what, int64_t sequence) {
  queue(replica, in, out, n, weight, stream, what, sequence, false);
}

void NcclCollective::start_all_reduce_async(int replica, const float* in, float* out, int64_t n, const float* weight,
                                            void* stream, const char* what, int64_t sequence) {
  if (in != out) {  // `in` may be reused by `stream`'s next work (a micro-batching accumulator is cleared right after):
    // the comm stream reduces a copy, in place
    check_cuda(cudaMemcpyAsync(out, in, sizeof(float) * static_cast<size_t>(n), cudaMemcpyDeviceToDevice,
                               static_cast<cudaStream_t>(stream)),
               "cudaMemcpyAsync", std::string("all-reduce '") + what + "'");
    in = out;
  }
  queue(replica, in, out, n, weight, stream, what, sequence, true);
}

void NcclCollective::finish_all_reduce_async(int replica, int64_t sequence, void* stream) {
  Replica& r = s_->replicas.at(static_cast<size_t>(replica));
  std::lock_guard lock(s_->m);
  r.ring->finish(sequence, stream);
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
