// The gather kernel's launcher (device_gather.cu), in plain C++ so that nvcc (C++17) compiles only the kernel;
// DeviceGather (device_gather.h) calls it.
#pragma once
#include <cstdint>

namespace tk::cuda {

// dst(n, row) in dtype `to` <- src rows (idx[i] when idx, a device pointer, is set, else first + i) in dtype `from`,
// converted by core/convert_one.h, or as to(float(x) * scale + offset) when `scaled`. Dtype codes as tk::DType
// numbers them. Launches on `stream` (a cudaStream_t) and returns at once.
void launch_gather_rows(const void* src, int from, void* dst, int to, const int64_t* idx, int64_t first, int64_t n,
                        int64_t row, bool scaled, float scale, float offset, int sm_count, void* stream);

}  // namespace tk::cuda
