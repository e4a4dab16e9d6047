// Per-device facts the CUDA kernels' launches need, read once from the runtime.
#pragma once

namespace tk::cuda {

// Streaming multiprocessors of CUDA device `index` (0 when the runtime cannot say: the geometry then assumes an
// H100-class count).
int sm_count(int index);

}  // namespace tk::cuda
