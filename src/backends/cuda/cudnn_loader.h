// cuDNN, loaded at run time with dlopen (as runtime/nvml.cpp loads NVML): the build needs cudnn.h only, and a
// machine without the library (or with another major version) runs the convolutions on im2col + cuBLASLt, saying
// why once. The project's GPU machine has cuDNN only inside the nvidia-cudnn-cu13 Python wheel: tools/gpu_check.sh
// puts its lib directory on LD_LIBRARY_PATH.
//
//   const tk::cuda::CudnnLibrary& lib = tk::cuda::CudnnLibrary::instance();
//   if (!lib.available()) std::puts(lib.status().c_str());  // "cuDNN not available: libcudnn.so.9: cannot open ..."
//   if (tk::cuda::cudnn_enabled()) ... lib.api().forward(...)   // cudnn_api.h, TK_HAVE_CUDNN builds
//
// TK_CUDNN=0 leaves it unloaded; TK_CUDNN_LIBRARY=/path/libcudnn.so.9 names the library.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace tk::cuda {

struct CudnnApi;  // cudnn_api.h

class CudnnLibrary {
 public:
  // The process's: TK_CUDNN_LIBRARY, else libcudnn.so.9 (the loader's search path); not loaded when TK_CUDNN=0.
  static const CudnnLibrary& instance();
  // The first of `names` that opens, has every entry point, has its sub-libraries (libcudnn_graph/ops/cnn.so.9) in
  // its own folder and is cuDNN 9 (tests construct their own). Only one cuDNN per process is meant: a second copy's
  // front library would find the first one's sub-libraries by name.
  explicit CudnnLibrary(const std::vector<std::string>& names);
  ~CudnnLibrary();
  CudnnLibrary(const CudnnLibrary&) = delete;
  CudnnLibrary& operator=(const CudnnLibrary&) = delete;

  bool available() const { return api_ != nullptr; }
  // "cuDNN 9.19.0 from libcudnn.so.9", or "cuDNN not available: <why>".
  const std::string& status() const { return status_; }
  size_t version() const { return version_; }  // cudnnGetVersion(); 0 when not available
  const CudnnApi& api() const { return *api_; }

 private:
  std::string open(const std::string& name, bool& unopened);  // "" when loaded

  void* library_ = nullptr;           // libcudnn.so.9, the front library
  std::vector<void*> sub_libraries_;  // graph, ops, cnn, ... from its folder, opened before any call into it
  std::unique_ptr<CudnnApi> api_;
  std::string status_;
  size_t version_ = 0;
};

// Whether this build can use cuDNN at all (cudnn.h found at configure time: TK_HAVE_CUDNN).
bool cudnn_built();
// Whether the CUDA convolutions take cuDNN now: built, loaded, and not switched off (TK_CUDNN=0 or
// set_cudnn_enabled(false)). The kernels ask on every call.
bool cudnn_enabled();
// Tests: the im2col path on a machine with cuDNN, and back. Does not load a library TK_CUDNN=0 kept out.
void set_cudnn_enabled(bool enabled);
// One line for `trainkit devices` and the log: "cuDNN 9.19.0 from libcudnn.so.9", "cuDNN not used (TK_CUDNN=0)",
// "cuDNN not available: ...", "cuDNN: built without cuDNN headers".
std::string cudnn_summary();
// Prints which path the CUDA convolutions take, and why, to stderr the first time it is called.
void log_convolution_path_once();

}  // namespace tk::cuda
