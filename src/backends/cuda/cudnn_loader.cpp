// cudnn_loader.h: dlopen of libcudnn.so.9, its entry points by dlsym (types from cudnn.h through cudnn_api.h), the
// version check, and the switches (TK_CUDNN, set_cudnn_enabled).
#include "backends/cuda/cudnn_loader.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cuda/cudnn_api.h"
#include "backends/cuda/cudnn_mapping.h"
#include "runtime/dl_symbol.h"
#include "runtime/log.h"
#include "runtime/settings.h"

namespace tk::cuda {
#ifndef TK_HAVE_CUDNN
struct CudnnApi {};
#endif

namespace {

bool switched_off_by_environment() {
  static const bool off = !runtime::setting_bool_or_default(runtime::Setting::cudnn);
  return off;
}
std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{true};
  return on;
}

}  // namespace

const CudnnLibrary& CudnnLibrary::instance() {
  static const CudnnLibrary* library = [] {
    if (switched_off_by_environment()) return new CudnnLibrary(std::vector<std::string>{});
    return new CudnnLibrary({runtime::setting_text(runtime::Setting::cudnn_library)
                                 .value_or(runtime::setting_info(runtime::Setting::cudnn_library).fallback)});
  }();
  return *library;
}

#ifdef TK_HAVE_CUDNN
namespace {

// cuDNN 9's libcudnn.so.9 is a small front library: its functions live in sub-libraries it dlopens by name on first
// use (its own folder first, through its RPATH $ORIGIN, then the loader's search path). With the front library alone
// the first call prints "Invalid handle. Cannot load symbol" and aborts the process, and with a sub-library missing
// from its folder it quietly takes another cuDNN's from the search path. So the loader opens them itself, by full
// path from the front library's folder, before calling anything: a missing one is a reason, not an abort, and the
// front library's later dlopen by name finds the ones already loaded (glibc matches loaded objects by their
// DT_SONAME, RTLD_LOCAL or not; checked with 9.19 and 9.26 copies in one folder). The legacy convolution API needs
// graph (everything depends on it), ops (handles, tensor descriptors) and cnn (the convolutions); the precompiled
// engines and the heuristics library are pinned too when that folder has them.
constexpr const char* kRequiredSubLibraries[] = {"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9"};
constexpr const char* kOptionalSubLibraries[] = {"libcudnn_engines_precompiled.so.9", "libcudnn_heuristic.so.9"};

// The folder `library` was loaded from ("" when the loader cannot say).
std::string folder_of(void* library) {
  char origin[PATH_MAX + 1] = {};
  if (dlinfo(library, RTLD_DI_ORIGIN, origin) != 0) return "";
  return origin;
}

}  // namespace

// Opens `name` as cuDNN 9; on success fills the members, else returns why not (`unopened`: dlopen found nothing).
std::string CudnnLibrary::open(const std::string& name, bool& unopened) {
  void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  unopened = library == nullptr;
  if (!library) {
    const char* e = dlerror();
    return e ? std::string(e) : name + ": cannot be opened";
  }
  std::vector<void*> subs;
  const auto close_all = [&] {
    for (auto it = subs.rbegin(); it != subs.rend(); ++it) dlclose(*it);
    dlclose(library);
  };
  auto api = std::make_unique<CudnnApi>();
  std::string missing;
#define TK_CUDNN_LOAD(member, name_)                                        \
  api->member = runtime::dl_symbol<decltype(api->member)>(library, #name_); \
  if (!api->member) missing += std::string(missing.empty() ? "" : ", ") + #name_;
  TK_CUDNN_ENTRY_POINTS(TK_CUDNN_LOAD)
#undef TK_CUDNN_LOAD
  if (!missing.empty()) {
    close_all();
    return name + " lacks " + missing + " (not cuDNN 9's library)";
  }
  const std::string folder = folder_of(library);
  if (folder.empty()) {
    close_all();
    return "cannot tell which folder " + name + " was loaded from, to load its sub-libraries from there";
  }
  // Opens `sub` from the front library's folder: "" when it did (or when an optional one is absent: cuDNN does without
  // it), else why not, everything opened so far closed again.
  const auto load = [&](const char* sub, bool optional) -> std::string {
    const std::string path = folder + "/" + sub;
    if (optional && access(path.c_str(), F_OK) != 0) return "";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      subs.push_back(h);
      return "";
    }
    const char* e = dlerror();
    const std::string problem = std::string(sub) + " next to " + folder + "/" + name.substr(name.rfind('/') + 1) +
                                ": " + (e ? std::string(e) : "cannot be opened") +
                                " (cuDNN 9's front library needs its sub-libraries in its own folder; install the "
                                "whole nvidia-cudnn-cu13 wheel or cuDNN 9 package)";
    close_all();
    return problem;
  };
  for (const char* sub : kRequiredSubLibraries)
    if (const std::string problem = load(sub, false); !problem.empty()) return problem;
  for (const char* sub : kOptionalSubLibraries)
    if (const std::string problem = load(sub, true); !problem.empty()) return problem;
  // cudnnGetVersion() answers with the graph sub-library's version, not the front library's: consistent here, as
  // graph was pinned from the front library's folder above.
  const size_t version = api->get_version();
  const std::string problem = cudnn_version_problem(version);
  if (!problem.empty()) {
    close_all();
    return problem + " (" + name + ")";
  }
  library_ = library;
  sub_libraries_ = std::move(subs);
  api_ = std::move(api);
  version_ = version;
  status_ = "cuDNN " + cudnn_version_text(version) + " from " + name;
  return "";
}

CudnnLibrary::CudnnLibrary(const std::vector<std::string>& names) {
  if (names.empty()) {
    status_ = switched_off_by_environment() ? "cuDNN not used (TK_CUDNN=0)" : "cuDNN not available: no library named";
    return;
  }
  // The first name that loads as cuDNN 9 wins; otherwise the first name's problem is the reason.
  std::string first_problem;
  bool first_unopened = false;
  for (const std::string& name : names) {
    bool unopened = false;
    const std::string problem = open(name, unopened);
    if (problem.empty()) return;
    if (first_problem.empty()) {
      first_problem = problem;
      first_unopened = unopened;
    }
  }
  status_ = "cuDNN not available: " + first_problem;
  if (first_unopened)
    status_ += " (install the nvidia-cudnn-cu13 wheel or cuDNN 9, and put its lib directory on LD_LIBRARY_PATH)";
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
  for (auto it = sub_libraries_.rbegin(); it != sub_libraries_.rend(); ++it) dlclose(*it);
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
    if (!runtime::log_enabled(runtime::LogSeverity::info)) return;
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
