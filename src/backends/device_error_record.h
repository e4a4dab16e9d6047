// What a device kernel writes when it finds an error in its inputs (backends/device_errors.h reads it): a plain struct
// that nvcc (C++17) and the host compiler both include.
#pragma once
#include <cstdint>

namespace tk::backends {

// Written by a kernel: `raised` first (0 -> 1, so the first error since the host last looked wins), then the rest.
struct DeviceErrorRecord {
  uint32_t raised = 0;
  int32_t site = -1;     // gather_site()'s number: which op and node, with the indices' shape
  int64_t position = 0;  // of the first bad index among the indices (in index order)
  int64_t value = 0;     // the bad index
  int64_t limit = 0;     // the table's rows along the axis
};

}  // namespace tk::backends
