// A function looked up in a library opened with dlopen, as a typed function pointer (null when the library lacks
// it): the libraries trainkit loads at run time rather than links, NVML (runtime/nvml.cpp) and cuDNN
// (backends/cuda/cudnn_loader.cpp).
//
//   auto init = tk::runtime::dl_symbol<decltype(&::cudnnGetVersion)>(library, "cudnnGetVersion");
#pragma once
#include <dlfcn.h>

#include <cstring>

namespace tk::runtime {

template <typename F>
F dl_symbol(void* library, const char* name) {
  void* p = dlsym(library, name);
  F f = nullptr;
  static_assert(sizeof f == sizeof p);
  std::memcpy(&f, &p, sizeof f);  // object pointer -> function pointer without a pedantic cast
  return f;
}

}  // namespace tk::runtime
