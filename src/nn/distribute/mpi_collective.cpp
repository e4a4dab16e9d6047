#include "nn/distribute/mpi_collective.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "trainkit/core/error.h"

#ifdef TK_HAVE_MPI
#include <mpi.h>
#endif

namespace tk::nn::distribute {

bool MpiCollective::launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
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
}  // namespace

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
}

void MpiCollective::wait(void* request, const char* what, int64_t sequence) {
  auto* req = static_cast<MPI_Request*>(request);
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (std::chrono::steady_clock::now() - start > timeout_) {
      std::fprintf(stderr,
                   "trainkit: rank %d of %d: collective '%s' (#%lld) made no progress for %.3g s: another rank is "
                   "stuck, stopped or dead. Aborting every rank (TK_COLLECTIVE_TIMEOUT=<seconds> waits longer).\n",
                   rank_, size_, what, static_cast<long long>(sequence),
                   static_cast<double>(timeout_.count()) / 1000.0);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 70);
    }
    if (spins > 1000) std::this_thread::yield();  // a long wait: leave the core to the ranks doing the work
  }
}

void MpiCollective::all_reduce(int, const float* in, float* out, int64_t n, float weight, const char* what,
                               int64_t sequence) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * weight;
  if (size_ == 1) return;
  // Reduced once, at rank 0, then broadcast: every rank applies the same bits (an allreduce may associate the
  // sum differently per rank, and the replicas' weights would drift apart).
  for (int64_t done = 0; done < n;) {  // MPI counts are int
    const int count = static_cast<int>(std::min<int64_t>(n - done, int64_t{1} << 30));
    MPI_Request r;
    MPI_Ireduce(rank_ == 0 ? MPI_IN_PLACE : out + done, rank_ == 0 ? out + done : nullptr, count, MPI_FLOAT, MPI_SUM, 0,
                MPI_COMM_WORLD, &r);
    wait(&r, what, sequence);
    MPI_Ibcast(out + done, count, MPI_FLOAT, 0, MPI_COMM_WORLD, &r);
    wait(&r, what, sequence);
    done += count;
  }
}

void MpiCollective::broadcast(void* data, size_t bytes, const char* what) {
  if (size_ == 1) return;
  for (size_t done = 0; done < bytes;) {
    const int count = static_cast<int>(std::min<size_t>(bytes - done, size_t{1} << 30));
    MPI_Request r;
    MPI_Ibcast(static_cast<char*>(data) + done, count, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
    wait(&r, what, -1);
    done += static_cast<size_t>(count);
  }
}

uint64_t MpiCollective::broadcast(uint64_t value, const char* what) {
  broadcast(&value, sizeof value, what);
  return value;
}

void MpiCollective::check_same(const std::string& fingerprint, const char* what) {
  if (size_ == 1) return;
  const uint64_t mine = std::hash<std::string>{}(fingerprint);
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  MPI_Request r;
  MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &r);
  wait(&r, what, -1);
  std::string differ;
  for (int k = 1; k < size_; ++k)
    if (all[static_cast<size_t>(k)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(k);
  if (!differ.empty())
    throw InvalidArgument(std::string(what) + ": rank(s) " + differ + " differ from rank 0 (this is rank " +
                          std::to_string(rank_) + ": " + fingerprint +
                          "); every rank must build the same model and fit with the same batch size");
}

#else  // built without MPI

MpiCollective& MpiCollective::world(std::chrono::milliseconds) {
  throw Unsupported(
      "MultiWorkerMirroredStrategy: this build of trainkit has no MPI (install libopenmpi-dev or an MPICH and "
      "rebuild; CMake finds it)");
}
MpiCollective::MpiCollective(std::chrono::milliseconds timeout) : timeout_(timeout) {}
void MpiCollective::wait(void*, const char*, int64_t) {}
void MpiCollective::all_reduce(int, const float*, float*, int64_t, float, const char*, int64_t) {
  throw Unsupported("MPI all-reduce: built without MPI");
}
void MpiCollective::broadcast(void*, size_t, const char*) { throw Unsupported("MPI broadcast: built without MPI"); }
uint64_t MpiCollective::broadcast(uint64_t, const char*) { throw Unsupported("MPI broadcast: built without MPI"); }
void MpiCollective::check_same(const std::string&, const char*) { throw Unsupported("MPI check: built without MPI"); }

#endif

}  // namespace tk::nn::distribute
