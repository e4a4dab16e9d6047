// graph/host_threads.h on the CPU backend's thread governor (threads.h) and OpenMP loops (parallel.h).
#include "graph/host_threads.h"

#include "backends/cpu/parallel.h"
#include "backends/cpu/threads.h"

namespace tk::graph {

int host_threads() noexcept { return cpu::adapted_threads(); }
bool pin_host_threads(int n) noexcept { return cpu::pin_threads(n); }
void share_host_threads(int n) noexcept { cpu::set_thread_share(n); }

void host_parallel_chunks(int64_t n, int64_t grain, void (*chunk)(void*, int64_t, int64_t), void* context) {
  cpu::parallel_for(
      n, [&](int64_t begin, int64_t end) { chunk(context, begin, end); }, grain);
}

}  // namespace tk::graph
