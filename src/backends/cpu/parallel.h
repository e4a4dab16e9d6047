// One threading model for the whole step: OpenMP, shared with OpenBLAS (Debian's openmp variant), so
// the two never oversubscribe the cores.
#pragma once
#include <cstdint>

namespace tk::cpu {

// Below this many elements a loop runs on one thread: a parallel region costs a few microseconds.
inline constexpr int64_t kParallelGrain = 1 << 15;

}  // namespace tk::cpu
