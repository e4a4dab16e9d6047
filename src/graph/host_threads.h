// The host's compute threads: the CPU backend's one team (OpenMP, shared with OpenBLAS and oneDNN), which CPU
// kernels and host-side work above graph/ (batch staging's conversions) run on. Declared here and defined by the CPU
// backend (backends/cpu/host_threads.cpp, over backends/cpu/threads.h), as ensure_backends_registered is: nn/ divides
// and pins the team (data-parallel replicas, a resumed run) and runs loops on it without knowing how it is made.
// Every backend has the host; another backend writes nothing for this.
//
//   graph::share_host_threads(graph::host_threads() / replicas);   // on each replica's thread
//   graph::host_parallel_for(rows, [&](int64_t lo, int64_t hi) { ... }, grain);
#pragma once
#include <cstdint>
#include <type_traits>

namespace tk::graph {

// Below this many elements a loop stays on the calling thread (a parallel region costs microseconds).
inline constexpr int64_t kHostParallelGrain = 1 << 15;

// The thread count chosen for this process (from the cores other processes leave free, or TK_THREADS): kernels'
// partitions, and so the last bits of a trained model, follow it.
int host_threads() noexcept;
// Uses exactly n threads from now on (a resumed run takes its backup's count). False, changing nothing, when n
// exceeds the threads this process may use.
bool pin_host_threads(int n) noexcept;
// Limits the calling thread's kernels to n threads (0: no limit): one data-parallel replica's share.
void share_host_threads(int n) noexcept;

// Calls chunk(context, begin, end) over contiguous chunks of [0, n), one per thread when n > grain.
void host_parallel_chunks(int64_t n, int64_t grain, void (*chunk)(void*, int64_t, int64_t), void* context);

// body(begin, end) over contiguous chunks of [0, n): one indirect call per chunk (never per element), and nothing
// allocated.
template <typename Body>
void host_parallel_for(int64_t n, Body&& body, int64_t grain = kHostParallelGrain) {
  host_parallel_chunks(
      n, grain,
      [](void* b, int64_t begin, int64_t end) { (*static_cast<std::remove_reference_t<Body>*>(b))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace tk::graph
