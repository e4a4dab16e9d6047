// The list of backends compiled into this build. graph/ calls ensure_backends_registered() before it
// looks up a kernel; registration is explicit (no static initializers a linker could drop).
#include <xmmintrin.h>

#include <mutex>

#include "backends/cpu/kernels.h"
#include "graph/kernel.h"

namespace tk::graph {

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] { cpu::register_kernels(); });
}

}  // namespace tk::graph

namespace tk::graph {

void prepare_thread_for_kernels() {
  constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  thread_local bool done = false;
  if (done) return;
  done = true;
  // The calling thread and every OpenMP worker (kernels and OpenBLAS run on the same pool).
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
}

}  // namespace tk::graph
