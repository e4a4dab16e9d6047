// How many threads a step uses: OMP_NUM_THREADS (or all cores) at most, fewer while other processes keep cores
// busy. An OpenMP team waits at every barrier for its slowest thread; when a peer is descheduled because another
// process holds its core, every parallel region of the step waits a scheduler time slice for it, and a 2-thread
// step on a 2-core machine next to one busy process ran 7-9x slower than alone (docs/benchmarks.md). With one
// thread per core that is actually free the step never waits for a descheduled peer.
//
//   tk::cpu::adapt_threads();   // cheap; parallel_for and every program run call it
//
// The count is chosen once per process, from a 100 ms sample of the load before the first step (the cores other
// processes kept busy: all cores' busy time in /proc/stat less this process's CPU time), and then kept: a count
// that changed during a run would change the last bits of the trained model. TK_THREADS=N pins the count;
// TK_THREADS=auto (the default) chooses it.
#pragma once
#include <cstdint>

namespace tk::cpu {

void adapt_threads() noexcept;
// Uses exactly n threads from now on (a resumed run takes the count its backup was made with, so that it
// computes the same bits). Returns false, changing nothing, when n exceeds the threads this process may use.
bool pin_threads(int n) noexcept;
// Limits the calling thread's kernels to n threads (0: no limit), e.g. one replica's share of the cores under data
// parallelism (nn/distribute/): replicas run side by side, each with cores / replicas threads, never more in all.
void set_thread_share(int n) noexcept;
// A small number per thread (0 for the first thread that asks, then 1, 2, ...): the key of per-thread oneDNN
// argument memories. A oneDNN primitive may run on several threads at once (data-parallel replicas run the same
// shapes side by side), but the memory objects its arguments are bound through may not.
int64_t thread_index() noexcept;
// The count adapt_threads chose last (the maximum until the first measurement).
int adapted_threads() noexcept;
// The most threads this process may use (OMP_NUM_THREADS, TK_THREADS or the cores): what scratch is sized for.
int max_threads() noexcept;

}  // namespace tk::cpu
