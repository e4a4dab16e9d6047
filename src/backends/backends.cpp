// The list of backends compiled into this build. graph/ calls ensure_backends_registered() before it
// looks up a kernel; registration is explicit (no static initializers a linker could drop).
#include <mutex>

#include "backends/cpu/kernels.h"
#include "graph/kernel.h"

namespace tk::graph {

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] { cpu::register_kernels(); });
}

}  // namespace tk::graph
