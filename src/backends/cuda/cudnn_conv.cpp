// Conv2D, FusedConv2D's convolution and their gradients on cuDNN's legacy convolution API (cudnnConvolutionForward,
// BackwardData, BackwardFilter), loaded at run time (cudnn_loader.h). Per (thread, device, convolution, dtype) a
// plan: the descriptors (cudnn_mapping.h's dims and types; the filter as KRSC, transposed into the workspace) and the
// algorithm, the first of cuDNN's ranked heuristic results (cudnnGetConvolution*Algorithm_v7; nothing is timed) that
// fits in the op's planned workspace, is deterministic when op determinism is on, and uses FMA math unless
// TK_ALLOW_TF32=1 (float32) or the tensors are float16 / bfloat16 (CUDNN_TENSOR_OP_MATH, float32 compute: cuDNN's
// PSEUDO_HALF / PSEUDO_BFLOAT16 configurations, every output rounded once).
// A convolution with no such algorithm returns false (conv.cpp runs im2col), so the memory plan never changes.
// The heuristics do not promise that an algorithm runs: when the first real call with it returns BAD_PARAM or
// NOT_SUPPORTED, that call returns false (im2col, which overwrites the whole output) and the plan moves on to the
// next ranked candidate that fits (next_algorithm), or to im2col for good; other failures stop the step.
//
// Why the legacy API and not the graph (backend) API: the legacy calls are a small, fixed set whose heuristics
// return exactly what the choice needs (a ranked list with workspace sizes and determinism), they are still in
// cuDNN 9 (libcudnn_cnn, marked deprecated), and each call's contract is documented argument by argument, which is
// what can be written correctly without a GPU to try it on. The graph API would fuse the bias and relu, at the cost of
// many more descriptors and engine configurations to get right blind.
#include "backends/cuda/cudnn_conv.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cuda/cudnn_loader.h"
#include "runtime/settings.h"

#ifdef TK_HAVE_CUDNN
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cudnn_api.h"
#include "backends/cuda/cudnn_mapping.h"
#include "runtime/log.h"
#include "trainkit/runtime/determinism.h"
#endif

namespace tk::cuda {
namespace {
std::atomic<int64_t> cudnn_calls{0}, im2col_calls{0}, cudnn16_calls{0};
std::atomic<bool> native16{runtime::setting_bool_or_default(runtime::Setting::cuda_native16)};
}  // namespace

ConvPathCounts conv_path_counts() { return {cudnn_calls.load(), im2col_calls.load(), cudnn16_calls.load()}; }
void count_conv_path(bool cudnn) { (cudnn ? cudnn_calls : im2col_calls).fetch_add(1); }
bool native16_conv_enabled() { return native16.load(std::memory_order_relaxed); }
void set_native16_conv_enabled(bool on) { native16.store(on); }

#ifdef TK_HAVE_CUDNN
int sm_count(int index);  // cuda_kernels.cpp

// conv_call_outcome (cudnn_mapping.cpp) reads statuses by cuDNN 9's categories.
static_assert(CUDNN_STATUS_SUCCESS == 0 && CUDNN_STATUS_CATEGORY(CUDNN_STATUS_BAD_PARAM) == 2000 &&
              CUDNN_STATUS_CATEGORY(CUDNN_STATUS_NOT_SUPPORTED) == 3000 &&
              CUDNN_STATUS_CATEGORY(CUDNN_STATUS_INTERNAL_ERROR) == 4000 &&
              CUDNN_STATUS_CATEGORY(CUDNN_STATUS_EXECUTION_FAILED) == 5000);
// cudnn_mapping.h's AlgoCandidate reads math types by these.
static_assert(CUDNN_FMA_MATH != CUDNN_TENSOR_OP_MATH && CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION != CUDNN_TENSOR_OP_MATH);

namespace {

cudnnDataType_t dnn_type(CudnnType t) {
  return t == CudnnType::float16 ? CUDNN_DATA_HALF : t == CudnnType::bfloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

void check_dnn(const CudnnApi& api, cudnnStatus_t s, const char* call, const std::string& where) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw Error(std::string(call) + " failed: " + api.get_error_string(s) + " (" + where +
              "; CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr makes cuDNN say why)");
}

// "Conv2D 'conv2d/conv'": built only for a new plan or an error, never on the step's path.
std::string where(const graph::Node& node) { return std::string(graph::op_name(node.op)) + " '" + node.name + "'"; }
void check_dnn(const CudnnApi& api, cudnnStatus_t s, const char* call, const graph::Node& node) {
  if (s != CUDNN_STATUS_SUCCESS) check_dnn(api, s, call, where(node));
}

// TK_ALLOW_TF32=1, read as gemm_cublaslt.cpp reads it: float32 convolutions may use TF32 tensor cores.
bool allow_tf32() {
  static const bool yes = runtime::setting_bool_or_default(runtime::Setting::allow_tf32);
  return yes;
}

// One handle per (thread, device), made on that device: a cuDNN handle belongs to the device current at
// cudnnCreate, and is not meant to be shared between threads. Its stream is set on every call (the context's).
cudnnHandle_t handle(const CudnnApi& api, int device) {
  struct Owned {
    const CudnnApi* api;
    cudnnHandle_t h;
    ~Owned() { api->destroy(h); }
  };
  thread_local std::map<int, std::unique_ptr<Owned>> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    int previous = -1;
    cudaGetDevice(&previous);
    if (previous != device)
      check(cudaSetDevice(device), "cudaSetDevice", "cuDNN's handle on cuda:" + std::to_string(device));
    cudnnHandle_t raw = nullptr;
    const cudnnStatus_t s = api.create(&raw);
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
    check_dnn(api, s, "cudnnCreate", "cuDNN's handle on cuda:" + std::to_string(device));
    it = handles.emplace(device, std::make_unique<Owned>(Owned{&api, raw})).first;
  }
  return it->second->h;
}

struct Plan {
  const CudnnApi* api = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // y: the output (forward) or dy (the gradients)
  cudnnFilterDescriptor_t w = nullptr;               // KRSC
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool runs = false;  // an algorithm was found; else the op runs on im2col (a 16-bit one: widened)
  int algo = 0;
  // The heuristics' ranked list and the one in use (index): _v7 results are not promised to run, so until a call
  // succeeded (verified) a refusal moves on to the next candidate that fits (next_algorithm).
  std::vector<AlgoCandidate> ranked;
  int pick = -1;
  bool verified = false;
  CudnnWorkspace ws;
  CudnnConvTypes types;
  ~Plan() {
    if (x) api->destroy_tensor(x);
    if (y) api->destroy_tensor(y);
    if (w) api->destroy_filter(w);
    if (conv) api->destroy_conv(conv);
  }
};

void adopt(Plan& p, int index, const std::string& at);

void set_tensor(const CudnnApi& api, cudnnTensorDescriptor_t t, cudnnDataType_t type, const CudnnTensor4d& d,
                const std::string& at) {
  check_dnn(api, api.set_tensor_4d_ex(t, type, d.n, d.c, d.h, d.w, d.n_stride, d.c_stride, d.h_stride, d.w_stride),
            "cudnnSetTensor4dDescriptorEx", at);
}

// What a plan falls back to, for the log lines.
const char* fallback(const Plan& p) {
  return p.types.data == CudnnType::float32 ? "it runs on im2col + cuBLASLt"
                                            : "it runs widened to float32 (backends/widen.h)";
}

// The ranked heuristic results as candidates: each successful one's workspace is also asked of
// cudnnGet*WorkspaceSize under its own math type (the larger number counts), as the perf result's may be short.
template <typename Perf, typename Query>
std::vector<AlgoCandidate> candidates(const CudnnApi& api, Plan& p, const std::vector<Perf>& perfs, Query query) {
  std::vector<AlgoCandidate> out;
  for (const Perf& perf : perfs) {
    AlgoCandidate c;
    c.algo = static_cast<int>(perf.algo);
    c.ok = perf.status == CUDNN_STATUS_SUCCESS;
    c.memory = perf.memory;
    c.deterministic = perf.determinism == CUDNN_DETERMINISTIC;
    c.tensor_math = perf.mathType != CUDNN_FMA_MATH;
    c.converts = perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    c.math_type = static_cast<int>(perf.mathType);
    if (c.ok) {
      size_t bytes = 0;
      c.ok = api.set_conv_math_type(p.conv, perf.mathType) == CUDNN_STATUS_SUCCESS &&
             query(perf.algo, &bytes) == CUDNN_STATUS_SUCCESS;
      c.memory = std::max(c.memory, bytes);
    }
    out.push_back(c);
  }
  return out;
}

// tensor_math: tensor-core algorithms allowed (16-bit, or TK_ALLOW_TF32=1).
std::unique_ptr<Plan> make_plan(const CudnnApi& api, cudnnHandle_t h, ConvKind kind, const CudnnConvDims& d,
                                const CudnnConvTypes& types, const CudnnWorkspace& ws, bool deterministic,
                                bool tensor_math, const std::string& at) {
  auto p = std::make_unique<Plan>();
  p->api = &api;
  p->ws = ws;
  p->types = types;
  const cudnnDataType_t data = dnn_type(types.data);
  check_dnn(api, api.create_tensor(&p->x), "cudnnCreateTensorDescriptor", at);
  check_dnn(api, api.create_tensor(&p->y), "cudnnCreateTensorDescriptor", at);
  check_dnn(api, api.create_filter(&p->w), "cudnnCreateFilterDescriptor", at);
  check_dnn(api, api.create_conv(&p->conv), "cudnnCreateConvolutionDescriptor", at);
  set_tensor(api, p->x, data, d.x, at);
  set_tensor(api, p->y, data, d.y, at);
  check_dnn(api, api.set_filter_4d(p->w, data, CUDNN_TENSOR_NHWC, d.k, d.c, d.r, d.s), "cudnnSetFilter4dDescriptor",
            at);
  check_dnn(api,
            api.set_conv_2d(p->conv, d.pad_h, d.pad_w, d.stride_h, d.stride_w, d.dilation_h, d.dilation_w,
                            CUDNN_CROSS_CORRELATION, dnn_type(types.compute)),
            "cudnnSetConvolution2dDescriptor", at);
  if (d.groups > 1)  // grouped / depthwise: one descriptor, cuDNN's own grouped kernels
    check_dnn(api, api.set_conv_group_count(p->conv, d.groups), "cudnnSetConvolutionGroupCount", at);
  // 16-bit: tensor cores (CUDNN_TENSOR_OP_MATH; the heuristics then also rank FMA kernels); float32: FMA, or cuDNN's
  // default (TF32 allowed) under TK_ALLOW_TF32=1.
  const cudnnMathType_t math = types.tensor_math ? CUDNN_TENSOR_OP_MATH
                               : tensor_math     ? CUDNN_DEFAULT_MATH
                                                 : CUDNN_FMA_MATH;
  check_dnn(api, api.set_conv_math_type(p->conv, math), "cudnnSetConvolutionMathType", at);
  int n = 0, c = 0, oh = 0, ow = 0;  // the mapping and cuDNN must agree on the output (graph::Window's rule)
  check_dnn(api, api.forward_output_dim(p->conv, p->x, p->w, &n, &c, &oh, &ow), "cudnnGetConvolution2dForwardOutputDim",
            at);
  if (n != d.y.n || c != d.y.c || oh != d.y.h || ow != d.y.w)
    throw Error("cuDNN computes an output of (" + std::to_string(n) + ", " + std::to_string(oh) + ", " +
                std::to_string(ow) + ", " + std::to_string(c) + ") for " + at + ", trainkit (" + std::to_string(d.y.n) +
                ", " + std::to_string(d.y.h) + ", " + std::to_string(d.y.w) + ", " + std::to_string(d.y.c) +
                "): a bug in cudnn_mapping.cpp (TK_CUDNN=0 runs im2col)");

  std::vector<AlgoCandidate> ranked;
  int count = 0, returned = 0;
  const char* what = "";
  if (kind == ConvKind::forward) {
    what = "cudnnGetConvolutionForwardAlgorithm_v7";
    check_dnn(api, api.forward_max_count(h, &count), "cudnnGetConvolutionForwardAlgorithmMaxCount", at);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(std::max(count, 1)));
    check_dnn(api, api.forward_heuristics(h, p->x, p->w, p->conv, p->y, count, &returned, perfs.data()), what, at);
    perfs.resize(static_cast<size_t>(std::clamp(returned, 0, count)));
    ranked = candidates(api, *p, perfs, [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
      return api.forward_workspace(h, p->x, p->w, p->conv, p->y, algo, bytes);
    });
  } else if (kind == ConvKind::backward_data) {
    what = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
    check_dnn(api, api.backward_data_max_count(h, &count), "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", at);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(std::max(count, 1)));
    check_dnn(api, api.backward_data_heuristics(h, p->w, p->y, p->conv, p->x, count, &returned, perfs.data()), what,
              at);
    perfs.resize(static_cast<size_t>(std::clamp(returned, 0, count)));
    ranked = candidates(api, *p, perfs, [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
      return api.backward_data_workspace(h, p->w, p->y, p->conv, p->x, algo, bytes);
    });
  } else {
    what = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
    check_dnn(api, api.backward_filter_max_count(h, &count), "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", at);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(std::max(count, 1)));
    check_dnn(api, api.backward_filter_heuristics(h, p->x, p->y, p->conv, p->w, count, &returned, perfs.data()), what,
              at);
    perfs.resize(static_cast<size_t>(std::clamp(returned, 0, count)));
    ranked = candidates(api, *p, perfs, [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
      return api.backward_filter_workspace(h, p->x, p->y, p->conv, p->w, algo, bytes);
    });
  }
  const int pick = choose_algorithm(ranked, ws.cudnn_bytes, deterministic, tensor_math);
  if (pick < 0) {
    if (runtime::log_enabled(runtime::LogSeverity::warning))
      std::fprintf(stderr, "trainkit: %s: no cuDNN algorithm (%s); %s\n", at.c_str(),
                   no_algorithm_reason(ranked, ws.cudnn_bytes, deterministic, tensor_math).c_str(), fallback(*p));
    return p;
  }
  p->ranked = std::move(ranked);
  adopt(*p, pick, at);
  return p;
}

// The plan takes ranked[index]: its math type goes on the descriptor the calls read (cuDNN picks the kernel by both).
void adopt(Plan& p, int index, const std::string& at) {
  const AlgoCandidate& chosen = p.ranked[static_cast<size_t>(index)];
  check_dnn(*p.api, p.api->set_conv_math_type(p.conv, static_cast<cudnnMathType_t>(chosen.math_type)),
            "cudnnSetConvolutionMathType", at);
  p.pick = index;
  p.algo = chosen.algo;
  p.runs = true;
}

// cuDNN refused the plan's algorithm on its first real call (BAD_PARAM or NOT_SUPPORTED): the next candidate that
// fits takes over from the next call on, or the plan goes to im2col; one line says which.
void after_refusal(Plan& p, const CudnnApi& api, cudnnStatus_t s, const char* call, const std::string& at,
                   bool deterministic, bool tensor_math) {
  const int refused = p.algo;
  const int next = next_algorithm(p.ranked, p.pick, p.ws.cudnn_bytes, deterministic, tensor_math);
  p.runs = false;
  if (next >= 0) {
    try {
      adopt(p, next, at);
    } catch (const Error&) {
      p.runs = false;
    }
  }
  if (p.runs)
    std::fprintf(stderr, "trainkit: %s: %s refused algorithm %d (%s); algorithm %d is tried next, %s this call\n",
                 at.c_str(), call, refused, api.get_error_string(s), p.algo,
                 p.types.data == CudnnType::float32 ? "im2col runs" : "the widened float32 kernel runs");
  else
    std::fprintf(stderr, "trainkit: %s: %s refused algorithm %d (%s) and no other fits; %s\n", at.c_str(), call,
                 refused, api.get_error_string(s), fallback(p));
}

}  // namespace

bool cudnn_convolution(const graph::KernelArgs& a, ConvKind kind, const graph::Window& g, int64_t filters,
                       size_t planned, const void* bias) {
  log_convolution_path_once();
  if (!cudnn_enabled() || !cudnn_unsupported(g, filters).empty()) return false;
  const DType dtype = a.out_dtype;
  for (size_t i = 0; i < 2; ++i)  // x, w or dy: the descriptors take one dtype (conv_native16.cpp checked it)
    if (a.in_dtypes[i] != dtype) return false;
  const CudnnConvTypes types = cudnn_conv_types(dtype);
  const int64_t groups = a.node.attrs.groups;
  const CudnnConvDims d = cudnn_dims(g, filters, groups);
  const CudnnWorkspace ws = cudnn_workspace(planned, d.filter_elements(), types.element_bytes);
  if (!ws.fits) return false;
  const CudnnApi& api = CudnnLibrary::instance().api();
  const int device = a.ctx.device.index;
  cudnnHandle_t h = nullptr;
  try {
    h = handle(api, device);
  } catch (const Error& e) {  // e.g. a cuDNN built for another CUDA: every convolution goes back to im2col
    std::fprintf(stderr, "trainkit: %s; CUDA convolutions run on im2col + cuBLASLt from now on\n", e.what());
    set_cudnn_enabled(false);
    return false;
  }
  const bool deterministic = config::is_op_determinism_enabled(), tf32 = allow_tf32();
  const bool tensor_math = types.tensor_math || tf32;

  using Key = std::tuple<int, ConvKind, DType, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, size_t, bool, bool>;
  thread_local std::map<Key, std::unique_ptr<Plan>> plans;
  auto& slot = plans[Key{device, kind, dtype, g.n,  g.h,  g.w,     g.c,    g.kh,           g.kw,          g.sh,
                         g.sw,   g.dh, g.dw,  g.pt, g.pl, filters, groups, ws.cudnn_bytes, deterministic, tensor_math}];
  if (!slot) {
    try {
      slot = make_plan(api, h, kind, d, types, ws, deterministic, tensor_math, where(a.node));
    } catch (const Error& e) {  // cuDNN refused the descriptors or the heuristics: this shape runs on im2col / widened
      slot = std::make_unique<Plan>();
      slot->api = &api;
      slot->types = types;
      std::fprintf(stderr, "trainkit: %s; %s\n", e.what(), fallback(*slot));
    }
  }
  Plan& p = *slot;
  if (!p.runs) return false;

  const auto u = reinterpret_cast<uintptr_t>(a.workspace);
  char* base = reinterpret_cast<char*>((u + kCudnnAlignment - 1) & ~uintptr_t{kCudnnAlignment - 1});
  void* filter = base;  // the filter (or its gradient) in KRSC: (F, KH·KW·C/G) in the convolution's dtype
  void* scratch = base + ws.cudnn_offset;
  const int sms = sm_count(device);
  const int64_t patch = g.kh * g.kw * (g.c / groups);
  const size_t eb = types.element_bytes;
  // alpha and beta are float for float, half and bfloat16 data (cuDNN's scaling-parameter rule). beta 1: y's prior
  // value (the broadcast bias) is added in the float32 compute before y's one rounding.
  const float one = 1.0f, zero = 0.0f;
  const float* beta = bias && kind == ConvKind::forward ? &one : &zero;
  const void* in0 = a.in[0];
  const void* in1 = a.in[1];
  void* out = a.out;
  check_dnn(api, api.set_stream(h, static_cast<cudaStream_t>(a.ctx.stream)), "cudnnSetStream", a.node);
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  const char* call = "";
  switch (kind) {
    case ConvKind::forward:  // y = conv(x, w) [+ bias]
      launch_transpose(in1, filter, patch, filters, eb, sms, a.ctx.stream);
      if (beta == &one)
        launch_broadcast_rows(bias, out, d.y.n * int64_t{d.y.h} * d.y.w, filters, eb, sms, a.ctx.stream);
      call = "cudnnConvolutionForward";
      s = api.forward(h, &one, p.x, in0, p.w, filter, p.conv, static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), scratch,
                      ws.cudnn_bytes, beta, p.y, out);
      break;
    case ConvKind::backward_data:  // dx = conv_grad_input(dy, w)
      launch_transpose(in1, filter, patch, filters, eb, sms, a.ctx.stream);
      call = "cudnnConvolutionBackwardData";
      s = api.backward_data(h, &one, p.w, filter, p.y, in0, p.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo),
                            scratch, ws.cudnn_bytes, &zero, p.x, out);
      break;
    case ConvKind::backward_filter:  // dw = conv_grad_filter(x, dy), in KRSC, then back to (KH·KW·C, F)
      call = "cudnnConvolutionBackwardFilter";
      s = api.backward_filter(h, &one, p.x, in0, p.y, in1, p.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo),
                              scratch, ws.cudnn_bytes, &zero, p.w, filter);
      if (s == CUDNN_STATUS_SUCCESS) launch_transpose(filter, out, filters, patch, eb, sms, a.ctx.stream);
      break;
  }
  switch (conv_call_outcome(static_cast<int>(s))) {
    case ConvCallOutcome::ok:
      p.verified = true;
      if (types.data == CudnnType::float32)
        count_conv_path(true);
      else
        cudnn16_calls.fetch_add(1);
      return true;
    case ConvCallOutcome::refused:
      if (p.verified) break;  // it ran before: a refusal now is a failure like any other
      after_refusal(p, api, s, call, where(a.node), deterministic, tensor_math);
      return false;  // conv.cpp runs im2col (conv_native16.cpp the widened kernel), which overwrites the whole output
    case ConvCallOutcome::failed:
      break;
  }
  check_dnn(api, s, call, a.node);  // EXECUTION_FAILED, INTERNAL_ERROR, ...: the step stops with cuDNN's reason
  return false;
}

#else  // built without cuDNN headers (or without CUDA)

bool cudnn_convolution(const graph::KernelArgs&, ConvKind, const graph::Window&, int64_t, size_t, const void*) {
  log_convolution_path_once();  // "built without cuDNN headers"
  return false;
}

#endif

}  // namespace tk::cuda
