// The list of backends compiled into this build. graph/ calls ensure_backends_registered() before it
// looks up a kernel or a backend; registration is explicit (no static initializers a linker could drop).
#include <memory>
#include <mutex>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "graph/backend.h"

namespace tk::graph {

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(std::make_unique<cpu::CpuBackend>());
    // The CUDA kernels go into the kernel table (a no-op without TK_CUDA); no CUDA Backend is registered until
    // programs can run on CUDA devices, so choosing one stays a clear Unsupported error.
    cuda::register_kernels();
  });
}

}  // namespace tk::graph
