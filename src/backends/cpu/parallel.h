// One threading model for the whole step: OpenMP, shared with OpenBLAS (Debian's openmp variant), so
// the two never oversubscribe the cores.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/threads.h"
#include "graph/host_threads.h"

namespace tk::cpu {

// Below this many elements a loop runs on the calling thread without entering OpenMP at all: a
// parallel region costs microseconds, more than a small elementwise op. (One value with graph::host_parallel_for's,
// which host code above graph/ runs its loops through.)
inline constexpr int64_t kParallelGrain = graph::kHostParallelGrain;

// Calls body(begin, end) over contiguous chunks of [0, n), one chunk per thread when n is large.
template <typename Body>
void parallel_for(int64_t n, Body body, int64_t grain = kParallelGrain) {
  adapt_threads();  // fewer threads while other processes keep cores busy (threads.h)
  if (n <= grain || omp_get_max_threads() == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace tk::cpu
