#include "trainkit/core/dtype.h"

#include <string>

#include "trainkit/core/error.h"

namespace tk {

DType dtype_from_name(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = static_cast<DType>(i);
    if (dtype_name(t) == name) return t;
  }
  throw InvalidArgument("unknown dtype '" + std::string(name) +
                        "' (expected one of float32, float16, bfloat16, int32, int64, uint8, bool)");
}

}  // namespace tk
