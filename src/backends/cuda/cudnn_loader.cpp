// cudnn_loader.h: dlopen of libcudnn.so.9, its entry points by dlsym (types from cudnn.h through cudnn_api.h), the
// version check, and the switches (TK_CUDNN, set_cudnn_enabled).
#include "backends/cuda/cudnn_loader.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cuda/cudnn_api.h"
#include "backends/cuda/cudnn_mapping.h"

namespace tk::cuda {
#ifndef TK_HAVE_CUDNN
struct CudnnApi {};
#endif

namespace {

bool switched_off_by_environment() {
  static const bool off = [] {
    const char* v = std::getenv("TK_CUDNN");
    if (!v) return false;
    const std::string s(v);
    return s == "0" || s == "false" || s == "FALSE" || s == "off" || s == "OFF";
  }();
  return off;
}
std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{true};
  return on;
}

#ifdef TK_HAVE_CUDNN
template <typename F>
F symbol(void* library, const char* name) {
  void* p = dlsym(library, name);
  F f = nullptr;
  static_assert(sizeof f == sizeof p);
  std::memcpy(&f, &p, sizeof f);  // object pointer -> function pointer without a pedantic cast
  return f;
}
#endif

}  // namespace

const CudnnLibrary& CudnnLibrary::instance() {
  static const CudnnLibrary* library = [] {
    if (switched_off_by_environment()) return new CudnnLibrary(std::vector<std::string>{});
    const char* override_name = std::getenv("TK_CUDNN_LIBRARY");
    if (override_name && *override_name) return new CudnnLibrary({override_name});
    return new CudnnLibrary({"libcudnn.so.9"});
  }();
  return *library;
}

#ifdef TK_HAVE_CUDNN
CudnnLibrary::CudnnLibrary(const std::vector<std::string>& names) {
  if (names.empty()) {
    status_ = switched_off_by_environment() ? "cuDNN not used (TK_CUDNN=0)" : "cuDNN not available: no library named";
    return;
  }
  std::string first_error;
  for (const std::string& name : names) {
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char* e = dlerror();
      if (first_error.empty()) first_error = e ? std::string(e) : name + ": cannot be opened";
      continue;
    }
    auto api = std::make_unique<CudnnApi>();
    std::string missing;
#define TK_CUDNN_LOAD(member, name_)                            \
  api->member = symbol<decltype(api->member)>(library, #name_); \
  if (!api->member) missing += std::string(missing.empty() ? "" : ", ") + #name_;
    TK_CUDNN_ENTRY_POINTS(TK_CUDNN_LOAD)
#undef TK_CUDNN_LOAD
    if (!missing.empty()) {
      status_ = "cuDNN not available: " + name + " lacks " + missing + " (not cuDNN 9's library)";
      dlclose(library);
      return;
    }
    const size_t version = api->get_version();
    const std::string problem = cudnn_version_problem(version);
    if (!problem.empty()) {
      status_ = "cuDNN not available: " + problem + " (" + name + ")";
      dlclose(library);
      return;
    }
    library_ = library;
    api_ = std::move(api);
    version_ = version;
    status_ = "cuDNN " + cudnn_version_text(version) + " from " + name;
    return;
  }
  status_ = "cuDNN not available: " + first_error +
            " (install the nvidia-cudnn-cu13 wheel or cuDNN 9, and put its lib directory on LD_LIBRARY_PATH)";
}
#else
CudnnLibrary::CudnnLibrary(const std::vector<std::string>&) {
#ifdef TK_HAVE_CUDA
  status_ = "cuDNN: built without cuDNN headers (cudnn.h was not found when this build was configured)";
#else
  status_ = "cuDNN: not built (this build has no CUDA backend)";
#endif
}
#endif

CudnnLibrary::~CudnnLibrary() {
  if (library_) dlclose(library_);
}

bool cudnn_built() {
#ifdef TK_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

bool cudnn_enabled() { return enabled_flag().load() && CudnnLibrary::instance().available(); }

void set_cudnn_enabled(bool enabled) { enabled_flag().store(enabled); }

std::string cudnn_summary() { return CudnnLibrary::instance().status(); }

void log_convolution_path_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CudnnLibrary& lib = CudnnLibrary::instance();
    if (lib.available())
      std::fprintf(stderr,
                   "trainkit: CUDA convolutions on %s (algorithms from its heuristics under each op's planned "
                   "workspace; im2col + cuBLASLt where it cannot run one)\n",
                   lib.status().c_str());
    else
      std::fprintf(stderr, "trainkit: CUDA convolutions on im2col + cuBLASLt: %s\n", lib.status().c_str());
  });
}

}  // namespace tk::cuda
