#include "nn/distribute/mpi_collective.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "graph/host_threads.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

#ifdef TK_HAVE_MPI
#include <mpi.h>
#endif

namespace tk::nn::distribute {

bool MpiCollective::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})  // the launchers' own
    if (std::getenv(v)) return true;
  return false;
}

#ifdef TK_HAVE_MPI

namespace {
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// The sum over the ranks of `count` values at `data`, in place, the same bits on every rank (see all_reduce).
void sum_in_place(void* data, int count, MPI_Datatype type, int rank, int size) {
  if (size == 2) {
    MPI_Allreduce(MPI_IN_PLACE, data, count, type, MPI_SUM, MPI_COMM_WORLD);
  } else {
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : data, rank == 0 ? data : nullptr, count, type, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Bcast(data, count, type, 0, MPI_COMM_WORLD);
  }
}
}  // namespace

void MpiCollective::end_job_after_error(int exit_code) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) return;
  std::fflush(stdout);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; should it, this rank still ends
}

MpiCollective& MpiCollective::world(std::chrono::milliseconds timeout) {
  static MpiCollective* w = new MpiCollective(timeout);  // lives until exit (MPI_Finalize runs atexit)
  return *w;
}

MpiCollective::MpiCollective(std::chrono::milliseconds timeout) : timeout_(timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // One thread per process calls MPI (the training loop's); FUNNELED says so.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw Unsupported("MultiWorkerMirroredStrategy: MPI_Init_thread failed (is this process started by mpirun?)");
    std::atexit(finalize_at_exit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (size_ > 1) std::thread([this] { watch(); }).detach();  // the world lives until exit
  // The ranks on this node share its cores: each takes cores / local ranks kernel threads, unless told otherwise
  // (TK_THREADS or OMP_NUM_THREADS), so that `mpirun -np 2` on a 2-core machine does not run 4 threads.
  // The same split gives this rank's local rank: which GPU it takes (nn/distribute/rank_device.h).
  MPI_Comm node;
  int local = 1;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &local);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_free(&node);
  }
  if (local > 1 && !runtime::setting_raw(runtime::Setting::threads) && !std::getenv("OMP_NUM_THREADS")) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    graph::pin_host_threads(static_cast<int>(std::max(1L, cores / local)));
  }
}

// The watchdog. Collectives are blocking calls: Open MPI's tuned algorithms took 4.7 ms for the CNN's 12.8 MB
// all-reduce where the nonblocking ones took 8.0 ms, and MPI itself has no timeout. Each is marked in flight; this
// thread wakes every tenth of the timeout and ends the process when one has been in flight longer than the
// timeout. It ends it with _Exit, not MPI_Abort, which only the thread that calls MPI may call
// (MPI_THREAD_FUNNELED): every launcher ends the job when a rank exits non-zero without MPI_Finalize.
void MpiCollective::watch() {
  std::unique_lock<std::mutex> lock(watch_mutex_);
  for (;;) {
    watch_cv_.wait_for(lock, std::max(std::chrono::milliseconds(10), timeout_ / 10));
    if (!in_flight_ || std::chrono::steady_clock::now() - since_ <= timeout_) continue;
    std::fprintf(stderr,
                 "trainkit: rank %d of %d: collective '%s' (#%lld) made no progress for %.3g s: another rank is "
                 "stuck, stopped or dead. Ending this rank so that the launcher ends the job "
                 "(TK_COLLECTIVE_TIMEOUT=<seconds> waits longer).\n",
                 rank_, size_, what_.c_str(), static_cast<long long>(sequence_),
                 static_cast<double>(timeout_.count()) / 1000.0);
    std::fflush(stderr);
    std::_Exit(70);
  }
}

MpiCollective::InFlight::InFlight(MpiCollective& c, const char* what, int64_t sequence) : c_(c) {
  std::lock_guard<std::mutex> lock(c_.watch_mutex_);
  c_.in_flight_ = true;
  c_.what_ = what;
  c_.sequence_ = sequence;
  c_.since_ = std::chrono::steady_clock::now();
}

MpiCollective::InFlight::~InFlight() {
  std::lock_guard<std::mutex> lock(c_.watch_mutex_);
  c_.in_flight_ = false;
}

void MpiCollective::all_reduce(int, const float* in, float* out, int64_t n, float weight, const char* what,
                               int64_t sequence) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * weight;
  if (size_ == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  // Every rank must apply the same bits. Two ranks: an allreduce adds two numbers, which is the same either way
  // round. More: an allreduce may associate the sum differently per rank (and the replicas' weights would drift
  // apart), so the sum is reduced once, at rank 0, and broadcast (twice the traffic).
  const InFlight guard(*this, what, sequence);
  for (int64_t done = 0; done < n;) {  // MPI counts are int
    const int count = static_cast<int>(std::min<int64_t>(n - done, int64_t{1} << 30));
    sum_in_place(out + done, count, MPI_FLOAT, rank_, size_);
    done += count;
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void MpiCollective::start_all_reduce(int replica, const float* in, float* out, int64_t n, float weight,
                                     const char* what, int64_t sequence) {
  if (size_ == 1 || n > (int64_t{1} << 30) || pending_count_ == kMaxPending) {  // done now; finish finds nothing
    const double before = seconds_;
    all_reduce(replica, in, out, n, weight, what, sequence);
    if (pending_count_ > 0) blocked_seconds_ += seconds_ - before;  // blocked inside the others' span
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * weight;  // `in` is consumed here (the caller may clear it)
  const auto t0 = std::chrono::steady_clock::now();         // the span starts when the transfer can
  MPI_Request request = MPI_REQUEST_NULL;
  {
    const InFlight guard(*this, what, sequence);
    const int count = static_cast<int>(n);
    if (size_ == 2)  // as all_reduce: two ranks add two numbers, the same either way round
      MPI_Iallreduce(MPI_IN_PLACE, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
    else  // one association for every rank: reduced at rank 0 now, broadcast in finish
      MPI_Ireduce(rank_ == 0 ? MPI_IN_PLACE : out, rank_ == 0 ? out : nullptr, count, MPI_FLOAT, MPI_SUM, 0,
                  MPI_COMM_WORLD, &request);
  }
  static_assert(sizeof(MPI_Request) <= sizeof(Pending::request), "MPI_Request does not fit Pending::request");
  if (pending_count_ == 0) in_flight_since_ = t0;  // the span: from the first start to the last finish
  Pending& p = pending_[pending_count_++];
  p.sequence = sequence;
  p.out = out;
  p.n = n;
  p.what = what;
  std::memcpy(p.request, &request, sizeof request);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seconds_ += took;
  blocked_seconds_ += took;
}

void MpiCollective::progress() {
  if (pending_count_ == 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pending_count_; ++i) {
    MPI_Request request;
    std::memcpy(&request, pending_[i].request, sizeof request);
    if (request == MPI_REQUEST_NULL) continue;  // done: finish only broadcasts (more than two ranks)
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);  // a completed request becomes MPI_REQUEST_NULL
    std::memcpy(pending_[i].request, &request, sizeof request);
    if (!done) break;  // the later ones wait for this one anyway
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  seconds_ += took;
  blocked_seconds_ += took;
}

void MpiCollective::finish_all_reduce(int, int64_t sequence) {
  int k = 0;
  while (k < pending_count_ && pending_[k].sequence != sequence) ++k;
  if (k == pending_count_) return;  // it was done when started
  for (int i = 0; i <= k; ++i) {    // in the order started (every rank started them in the same order)
    Pending& p = pending_[i];
    const auto t0 = std::chrono::steady_clock::now();
    {
      const InFlight guard(*this, p.what, p.sequence);
      MPI_Request request;
      std::memcpy(&request, p.request, sizeof request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      if (size_ > 2) MPI_Bcast(p.out, static_cast<int>(p.n), MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
    const auto t1 = std::chrono::steady_clock::now();
    seconds_ += std::chrono::duration<double>(t1 - t0).count();
    blocked_seconds_ += std::chrono::duration<double>(t1 - t0).count();
  }
  std::move(pending_ + k + 1, pending_ + pending_count_, pending_);
  pending_count_ -= k + 1;
  if (pending_count_ == 0)
    span_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - in_flight_since_).count();
}

void MpiCollective::all_reduce_sum(double* data, int64_t n, const char* what) {
  if (size_ == 1 || n == 0) return;
  const InFlight guard(*this, what, -1);
  sum_in_place(data, static_cast<int>(n), MPI_DOUBLE, rank_, size_);  // a few logs: one association, as all_reduce
}

void MpiCollective::all_gather(void* data, const std::vector<int64_t>& counts, size_t item_bytes, const char* what) {
  if (size_ == 1 || item_bytes == 0) return;
  if (counts.size() != static_cast<size_t>(size_))
    throw std::logic_error(std::string("all_gather '") + what + "': " + std::to_string(counts.size()) + " counts for " +
                           std::to_string(size_) + " ranks");
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  std::vector<int> count(counts.size()), at(counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    count[r] = static_cast<int>(std::min(counts[r], kMax));
    at[r] = static_cast<int>(std::min(total, kMax));
    total += counts[r];
  }
  // The same counts on every rank: every rank throws here alike, before the collective.
  if (total > kMax || item_bytes > static_cast<size_t>(kMax))
    throw InvalidArgument(std::string("MPI all_gather '") + what + "': " + std::to_string(total) + " items of " +
                          std::to_string(item_bytes) + " bytes pass MPI's int counts (use a smaller batch size)");
  MPI_Datatype item;
  MPI_Type_contiguous(static_cast<int>(item_bytes), MPI_BYTE, &item);
  MPI_Type_commit(&item);
  {
    const InFlight guard(*this, what, -1);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, count.data(), at.data(), item, MPI_COMM_WORLD);
  }
  MPI_Type_free(&item);
}

void MpiCollective::abort(const std::string& why) {
  std::fprintf(stderr, "trainkit: rank %d of %d failed: %s\nEnding every rank.\n", rank_, size_, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 71);
  std::_Exit(71);  // MPI_Abort does not return; should it, the rank still ends
}

void MpiCollective::broadcast(void* data, size_t bytes, const char* what) {
  if (size_ == 1) return;
  const InFlight guard(*this, what, -1);
  for (size_t done = 0; done < bytes;) {
    const int count = static_cast<int>(std::min<size_t>(bytes - done, size_t{1} << 30));
    MPI_Bcast(static_cast<char*>(data) + done, count, MPI_BYTE, 0, MPI_COMM_WORLD);
    done += static_cast<size_t>(count);
  }
}

uint64_t MpiCollective::broadcast(uint64_t value, const char* what) {
  broadcast(&value, sizeof value, what);
  return value;
}

void MpiCollective::check_same(const std::string& fingerprint, const char* what, const char* remedy) {
  if (size_ == 1) return;
  const uint64_t mine = std::hash<std::string>{}(fingerprint);
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  {
    const InFlight guard(*this, what, -1);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  }
  std::string differ;
  for (int k = 1; k < size_; ++k)
    if (all[static_cast<size_t>(k)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(k);
  if (!differ.empty())
    throw InvalidArgument(std::string(what) + ": rank(s) " + differ + " differ from rank 0 (this is rank " +
                          std::to_string(rank_) + ": " + fingerprint + "); " +
                          (remedy ? remedy : "every rank must build the same model and fit with the same batch size"));
}

#else  // built without MPI

MpiCollective& MpiCollective::world(std::chrono::milliseconds) {
  throw Unsupported(
      "MultiWorkerMirroredStrategy: this build of trainkit has no MPI (install libopenmpi-dev or an MPICH and "
      "rebuild; CMake finds it)");
}
MpiCollective::MpiCollective(std::chrono::milliseconds timeout) : timeout_(timeout) {}
void MpiCollective::watch() {}
MpiCollective::InFlight::InFlight(MpiCollective& c, const char*, int64_t) : c_(c) {}
MpiCollective::InFlight::~InFlight() = default;
void MpiCollective::all_reduce(int, const float*, float*, int64_t, float, const char*, int64_t) {
  throw Unsupported("MPI all-reduce: built without MPI");
}
void MpiCollective::start_all_reduce(int, const float*, float*, int64_t, float, const char*, int64_t) {
  throw Unsupported("MPI all-reduce: built without MPI");
}
void MpiCollective::finish_all_reduce(int, int64_t) {}
void MpiCollective::progress() {}
void MpiCollective::all_reduce_sum(double*, int64_t, const char*) {
  throw Unsupported("MPI all-reduce: built without MPI");
}
void MpiCollective::all_gather(void*, const std::vector<int64_t>&, size_t, const char*) {
  throw Unsupported("MPI all-gather: built without MPI");
}
void MpiCollective::broadcast(void*, size_t, const char*) { throw Unsupported("MPI broadcast: built without MPI"); }
void MpiCollective::end_job_after_error(int) {}
void MpiCollective::abort(const std::string& why) {
  std::fprintf(stderr, "trainkit: %s\n", why.c_str());
  std::_Exit(71);
}
uint64_t MpiCollective::broadcast(uint64_t, const char*) { throw Unsupported("MPI broadcast: built without MPI"); }
void MpiCollective::check_same(const std::string&, const char*, const char*) {
  throw Unsupported("MPI check: built without MPI");
}

#endif

}  // namespace tk::nn::distribute
