// Where CUDA kernels record the errors they find in their inputs (backends/device_errors.h): one DeviceErrorRecord per
// device in mapped, portable pinned host memory (the kernel writes it over the bus only when it finds an error; the
// host reads it without a copy), checked by every synchronization the backend already makes — CudaBackend's
// synchronize and copy_to_host, ComputeStream::synchronize, the lagged logs' wait — which then throw the CPU kernel's
// InvalidArgument.
//
//   launch_check_indices(idx, 4, count, rows, tk::cuda::device_error_record(dev), site, stream);
//   cudaStreamSynchronize(stream); tk::cuda::raise_device_errors(dev);   // throws what the kernel recorded
#pragma once
#include "backends/device_error_record.h"

namespace tk::cuda {

// The record kernels on `device` write (allocated on first use; the same for the life of the process).
backends::DeviceErrorRecord* device_error_record(int device);
// After a synchronization of work on `device`: throws the error a kernel recorded there since the last call (and
// clears it); nothing when there is none or no record was ever asked for.
void raise_device_errors(int device);

}  // namespace tk::cuda
