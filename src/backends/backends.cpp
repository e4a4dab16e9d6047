// The list of backends compiled into this build. graph/ calls ensure_backends_registered() before it
// looks up a kernel or a backend; registration is explicit (no static initializers a linker could drop).
// A new backend adds its line here (CONTRIBUTING.md, "Adding a backend").
#include <memory>
#include <mutex>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "graph/backend.h"
#include "io/file_staging.h"

namespace tk::graph {

void ensure_backends_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(std::make_unique<cpu::CpuBackend>());
#ifdef TK_HAVE_CUDA
    // Programs, and so fit, evaluate and predict, run and train on CUDA devices (docs/cuda-execution.md).
    register_backend(std::make_unique<cuda::CudaBackend>());
#endif
    // A file's staging buffer for a device's tensor is page-locked by that device's backend (io/file_staging.h).
    static const io::HostPinning pinning{[](Device d, void* p, size_t n) { return backend(d.kind).pin_host(p, n); },
                                         [](Device d, void* p) { backend(d.kind).unpin_host(p); }};
    io::set_host_pinning(&pinning);
  });
}

}  // namespace tk::graph
