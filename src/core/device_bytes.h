// Byte operations on a device's memory, defined by the runtime next to device_allocate (runtime/config.cpp):
// memset/memcpy on the cpu, the CUDA runtime (cudaMemset, cudaMemcpy with cudaMemcpyDefault) for CUDA devices.
// Tensor data on a CUDA device is device memory: nothing here dereferences it on the host. Synchronous.
//
//   tk::device_copy(mirror.raw(), mirror.device(), w.raw(), w.device(), w.nbytes());   // host -> cuda:0
#pragma once
#include <cstddef>

#include "trainkit/core/device.h"

namespace tk {

void device_memset_zero(void* p, size_t bytes, Device device);
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// What an allocation of `bytes` takes: rounded up to the device allocator's granularity (256 bytes).
constexpr size_t allocated_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace tk
