#include "graph/backend.h"

#include <array>

#include "trainkit/core/error.h"

namespace tk::graph {
namespace {
std::array<std::unique_ptr<Backend>, kDeviceKindCount>& backends() {
  static std::array<std::unique_ptr<Backend>, kDeviceKindCount> b;
  return b;
}
}  // namespace

void register_backend(std::unique_ptr<Backend> b) {
  const auto k = static_cast<size_t>(b->kind());
  backends()[k] = std::move(b);
  backends()[k]->register_kernels();
}

bool has_backend(DeviceKind kind) {
  ensure_backends_registered();
  return backends()[static_cast<size_t>(kind)] != nullptr;
}

Backend& backend(DeviceKind kind) {
  ensure_backends_registered();
  Backend* b = backends()[static_cast<size_t>(kind)].get();
  if (!b)
    throw Unsupported("this build has no compute backend for " + Device{kind, 0}.to_string() +
                      " devices (configure with -DTK_CUDA=ON for the CUDA backend; programs run on the cpu here)");
  return *b;
}

}  // namespace tk::graph
