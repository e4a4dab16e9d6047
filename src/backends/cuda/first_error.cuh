// The device side of backends/device_errors.h's records, for the one-block check kernels launched before an op whose
// input may be invalid (Gather's indices, an integer divisor or exponent): each thread scans a strided share of the
// input with the CPU's own scan, the block keeps the smallest bad position, and thread 0 records it with its value;
// the record's first error since the host last looked wins (atomicCAS on `raised`). The host throws it at the next
// synchronization (device_errors_cuda.h).
//
//   record_first_bad(count, [&](int64_t start, int64_t step) { return math::first_outside(idx, count, rows, start,
//                    step); }, idx, rows, record, site);   // inside a kernel launched as <<<1, kCheckThreads>>>
#pragma once
#include <cstdint>

#include "backends/device_error_record.h"

namespace tk::cuda {

inline constexpr int kCheckThreads = 256;

// scan(start, step): the first bad position among start, start + step, ... < count, else count. values[p]: the bad
// element recorded; limit: the record's limit (a table's rows, or 0).
template <typename Scan, typename T>
__device__ void record_first_bad(int64_t count, Scan scan, const T* values, int64_t limit,
                                 backends::DeviceErrorRecord* record, int32_t site) {
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) first = static_cast<unsigned long long>(count);
  __syncthreads();
  const int64_t j = scan(static_cast<int64_t>(threadIdx.x), static_cast<int64_t>(kCheckThreads));
  if (j < count) atomicMin(&first, static_cast<unsigned long long>(j));
  __syncthreads();
  if (threadIdx.x == 0 && first < static_cast<unsigned long long>(count) && atomicCAS(&record->raised, 0u, 1u) == 0u) {
    const int64_t p = static_cast<int64_t>(first);
    record->site = site;
    record->position = p;
    record->value = static_cast<int64_t>(values[p]);
    record->limit = limit;
    __threadfence_system();  // host memory: visible to the host once the stream is synchronized
  }
}

}  // namespace tk::cuda
