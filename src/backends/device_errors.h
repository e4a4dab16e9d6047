// Errors a device kernel finds in its inputs (an index outside a gather's table) reported as the CPU kernel reports
// them. A kernel cannot throw: it records the first error in a DeviceErrorRecord (host memory the device writes, one
// per device), and the host turns the record into the tk::InvalidArgument the CPU kernel throws, word for word, at the
// backend's next synchronization (backends/cuda/device_errors_cuda.cpp). The message and the record's decoding live
// here, in plain C++, so that CPU tests prove them.
//
//   const int site = tk::backends::gather_site(node, indices_shape);    // host, when the kernel is launched
//   ... the kernel: record_first_error(record, site, position, index, rows) ...
//   tk::backends::raise_recorded_error(record);                          // host, after a synchronize: throws
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/device_error_record.h"
#include "trainkit/core/shape.h"

namespace tk::graph {
struct Node;
}

namespace tk::backends {

// The CPU Gather/GatherGrad's error text: the op, the node, the index, its position, the indices' shape, the table.
std::string gather_index_message(std::string_view op, const std::string& node, int64_t index, int64_t position,
                                 const Shape& indices, int64_t rows);

// A number naming (node's op, node's name, the indices' shape) for a kernel to record; the same node gets the same
// number (looked up by its text, under a lock; called when a kernel is launched, not per element).
int32_t gather_site(const graph::Node& node, const Shape& indices);

// An integer Binary's bad second operand (math::bad_integer_operand: a divisor of 0, a negative exponent): the op,
// the node, the function, the value, its position in b and b's shape, and what to do instead.
std::string integer_operand_message(const graph::Node& node, int64_t value, int64_t position, const Shape& operand);
// As gather_site, for an integer Binary node whose second operand has shape `operand`.
int32_t integer_operand_site(const graph::Node& node, const Shape& operand);

// If `r` holds an error: clears it and throws the InvalidArgument its site's CPU kernel would have thrown.
void raise_recorded_error(DeviceErrorRecord& r);

}  // namespace tk::backends
