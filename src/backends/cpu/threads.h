// How many threads a step uses: OMP_NUM_THREADS (or all cores) at most, fewer while other processes keep cores
// busy. An OpenMP team waits at every barrier for its slowest thread; when a peer is descheduled because another
// process holds its core, every parallel region of the step waits a scheduler time slice for it, and a 2-thread
// step on a 2-core machine next to one busy process ran 7-9x slower than alone (docs/benchmarks.md). With one
// thread per core that is actually free the step never waits for a descheduled peer.
//
//   tk::cpu::adapt_threads();   // cheap; parallel_for calls it: re-measures the load at most every 250 ms
//
// TK_THREADS=N pins the count (no adaptation; bitwise-reproducible reductions); TK_THREADS=auto (default) adapts.
#pragma once

namespace tk::cpu {

void adapt_threads() noexcept;
// The count adapt_threads chose last (the maximum until the first measurement).
int adapted_threads() noexcept;

}  // namespace tk::cpu
