// Launchers of the general ops' int32/int64 CUDA kernels (integer_ops.cu), plain C++ signatures so tensor_kernels.cpp
// (host compiler) registers them; the math is the CPU's (backends/math/binary.h, reduce.h). elem_bytes: 4 (int32)
// or 8 (int64). Each queues on `stream` and returns; a launch error throws tk::Error.
//
//   tk::cuda::launch_check_integer_operand(f, b, 4, b_count, tk::cuda::device_error_record(dev), site, stream);
//   tk::cuda::launch_integer_binary(f, a, b, y, 4, layout, total, sm_count, stream);
#pragma once
#include <cstdint>

#include "backends/cuda/tensor_launchers.h"

namespace tk::cuda {

// y = f(a, b) over a broadcast layout of `total` output elements; every arithmetic function but divide.
void launch_integer_binary(graph::BinaryFn f, const void* a, const void* b, void* y, int elem_bytes,
                           const math::Strided& s, int64_t total, int sm_count, Stream stream);
void launch_integer_compare(graph::BinaryFn f, const void* a, const void* b, bool* y, int elem_bytes,
                            const math::Strided& s, int64_t total, int sm_count, Stream stream);
// Records in *record (device_errors_cuda.h) the first of b[0..count) that math::bad_integer_operand names (a divisor
// of 0, a negative exponent), as `site` (backends::integer_operand_site). Launched before launch_integer_binary.
void launch_check_integer_operand(graph::BinaryFn f, const void* b, int elem_bytes, int64_t count,
                                  backends::DeviceErrorRecord* record, int32_t site, Stream stream);
// As launch_reduce and launch_arg_reduce (tensor_launchers.h): sum, prod, max, min; one thread per output.
void launch_integer_reduce(graph::ReduceFn f, const void* x, void* y, int elem_bytes, const math::Strided& kept,
                           const math::Strided& reduced, int64_t outputs, int64_t count, int sm_count, Stream stream);
void launch_integer_arg_reduce(bool max, const void* x, int elem_bytes, int32_t* y, int64_t outer, int64_t n,
                               int64_t inner, int sm_count, Stream stream);

}  // namespace tk::cuda
