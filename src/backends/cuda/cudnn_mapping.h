// How trainkit's convolutions map onto cuDNN's legacy convolution API (cudnn_conv.cpp), as plain host code built in
// every build and unit-tested on the CPU (tests/test_cudnn_mapping.cpp): which convolutions take cuDNN, the
// descriptors' dimensions and strides, how the op's planned workspace is split, and which of cuDNN's heuristic
// algorithms is chosen.
//
//   const std::string why = tk::cuda::cudnn_unsupported(g, filters);  // "" when cuDNN can run it
//   const tk::cuda::CudnnConvDims d = tk::cuda::cudnn_dims(g, filters);
//   const tk::cuda::CudnnConvTypes t = tk::cuda::cudnn_conv_types(DType::bf16);  // descriptors' data and compute
//   const tk::cuda::CudnnWorkspace ws = tk::cuda::cudnn_workspace(planned, d.filter_elements(), t.element_bytes);
//   const int pick = tk::cuda::choose_algorithm(candidates, ws.cudnn_bytes, deterministic, t.tensor_math || tf32);
//
// trainkit's tensors: x (N, H, W, C) NHWC, w (KH, KW, C, F) "HWIO", y (N, OH, OW, F). cuDNN takes NHWC activations
// as 4-d descriptors with explicit strides, but its filters only as KCRS or KRSC (F, KH, KW, C): the kernels
// transpose w (KH·KW·C, F) into (F, KH·KW·C) in the workspace, and a filter gradient back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/window.h"
#include "trainkit/core/dtype.h"

namespace tk::cuda {

// A 4-d tensor descriptor as cudnnSetTensor4dDescriptorEx takes it: dims in N, C, H, W order, each with its stride
// in elements (NHWC storage: C's stride is 1).
struct CudnnTensor4d {
  int n = 0, c = 0, h = 0, w = 0;
  int n_stride = 0, c_stride = 0, h_stride = 0, w_stride = 0;
};
CudnnTensor4d nhwc_descriptor(int64_t n, int64_t c, int64_t h, int64_t w);

struct CudnnConvDims {
  CudnnTensor4d x, y;
  int k = 0, c = 0, r = 0, s = 0;  // the filter, cudnnSetFilter4dDescriptor(..., CUDNN_TENSOR_NHWC, k, c, r, s): KRSC
  int groups = 1;  // cudnnSetConvolutionGroupCount; c is then the channels per group (trainkit's (KH, KW, C/G, F))
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t filter_elements() const { return int64_t{k} * c * r * s; }
};

// Why cuDNN cannot run this convolution (window g, f filters), or "" when it can. cuDNN pads both sides of an axis
// alike; TensorFlow's "same" padding puts the odd pixel at the bottom/right (e.g. stride 2, even input), which stays
// on im2col. Empty convolutions and tensors beyond int32 indexing stay there too.
std::string cudnn_unsupported(const graph::Window& g, int64_t filters);
CudnnConvDims cudnn_dims(const graph::Window& g, int64_t filters,
                         int64_t groups = 1);  // when cudnn_unsupported(g, f) is ""

// The descriptors' types for a convolution whose tensors are all `t` (f32, f16 or bf16): the x, y and filter
// descriptors in `t`, the convolution descriptor's compute type always float (cuDNN's FLOAT_CONFIG, and for 16 bits
// its PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG: 16-bit storage, float32 accumulation, each output rounded once,
// as the CPU's widened kernels compute). 16-bit convolutions may use tensor cores (CUDNN_TENSOR_OP_MATH: the 16-bit
// products are exact and accumulate in float32); float32 ones only with TK_ALLOW_TF32=1 (TF32 rounds the operands).
enum class CudnnType { float32, float16, bfloat16 };  // CUDNN_DATA_FLOAT, _HALF, _BFLOAT16 (cudnn_conv.cpp)
struct CudnnConvTypes {
  CudnnType data = CudnnType::float32;
  CudnnType compute = CudnnType::float32;
  size_t element_bytes = 4;
  bool tensor_math = false;  // CUDNN_TENSOR_OP_MATH on the descriptor, and tensor-core algorithms allowed
};
CudnnConvTypes cudnn_conv_types(DType t);  // t: f32, f16 or bf16

// Whether a float16 / bfloat16 convolution node runs on cuDNN in its own dtype ("" when it may; else why it runs
// widened to float32, backends/widen.h): every input (x, the filter or dy, a bias) and the output in the same 16-bit
// dtype, and native 16-bit kernels not switched off (TK_CUDA_NATIVE16=0, `enabled` false). A convolution that may
// still needs cudnn_unsupported's shape rules, cuDNN loaded and an algorithm within the planned workspace; each
// "no" is the widened path, never an error.
std::string native16_conv_unsupported(std::span<const DType> inputs, DType output, bool enabled);

// The op's planned workspace (conv.cpp's rule, the same number whichever path runs, so that the memory plan does not
// depend on cuDNN), split for cuDNN: [round the base up to 256 | the filter in KRSC | cuDNN's workspace]. The base's
// misalignment is taken at its worst (the program's workspace is only 64-byte aligned), so the split, and the
// algorithm chosen under it, depend on the shape alone.
struct CudnnWorkspace {
  bool fits = false;        // the filter copy fits (else: im2col)
  size_t filter_bytes = 0;  // at the aligned base
  size_t cudnn_offset = 0;  // from the aligned base; 256-aligned
  size_t cudnn_bytes = 0;   // the limit on the algorithm's workspace
};
inline constexpr size_t kCudnnAlignment = 256;
inline constexpr size_t kWorkspaceBaseAlignment = 64;  // graph::kArenaAlignment
// element_bytes: the filter's (4 for float32, 2 for float16 / bfloat16).
CudnnWorkspace cudnn_workspace(size_t planned, int64_t filter_elements, size_t element_bytes = sizeof(float));

// One of cuDNN's heuristic results (cudnnConvolution*AlgoPerf_t), as far as the choice needs it.
struct AlgoCandidate {
  int algo = 0;
  bool ok = false;             // status == CUDNN_STATUS_SUCCESS
  size_t memory = 0;           // workspace bytes it needs (the larger of the perf result and the workspace query)
  bool deterministic = false;  // determinism == CUDNN_DETERMINISTIC
  bool tensor_math = false;    // mathType != CUDNN_FMA_MATH: may use tensor cores (TF32 on float32)
  bool converts = false;       // mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: may round operands to float16
  int math_type = 0;           // the cudnnMathType_t, set on the descriptor when this one is chosen
};
// The first candidate (cuDNN ranks them, best first) that succeeded, fits in `limit`, is deterministic when
// `deterministic_only`, uses plain FMA math unless `allow_tensor_math` (16-bit convolutions, or float32 with
// TK_ALLOW_TF32=1), and never one that converts operands down (ALLOW_CONVERSION: float32 or bfloat16 operands rounded
// to float16 would not be the CPU's result); -1 when none does (the call falls back to im2col, or for a 16-bit
// convolution to the widened float32 kernel).
int choose_algorithm(const std::vector<AlgoCandidate>& ranked, size_t limit, bool deterministic_only,
                     bool allow_tensor_math);
// cudnnGetConvolution*Algorithm_v7 ranks algorithms without promising that they run (PyTorch's Conv_v7.cpp tries the
// next one too): after cuDNN refused ranked[refused] on its first real call, the next candidate after it that
// choose_algorithm's rules accept, or -1 (the convolution then stays on im2col).
int next_algorithm(const std::vector<AlgoCandidate>& ranked, int refused, size_t limit, bool deterministic_only,
                   bool allow_tensor_math);
// What a convolution call's cudnnStatus_t (as an int; cuDNN 9 numbers them in categories of a thousand,
// CUDNN_STATUS_CATEGORY) means for its plan: ok (0); refused, this algorithm cannot run this convolution
// (BAD_PARAM 2xxx, NOT_SUPPORTED 3xxx and their sub-codes: try the next candidate); failed, anything else
// (INTERNAL_ERROR 4xxx, EXECUTION_FAILED 5xxx, ...: thrown, the step stops).
enum class ConvCallOutcome { ok, refused, failed };
ConvCallOutcome conv_call_outcome(int status);
// Why choose_algorithm found none, for the log: "3 candidates: 1 failed, 2 need more than 32.00 MiB of workspace".
std::string no_algorithm_reason(const std::vector<AlgoCandidate>& ranked, size_t limit, bool deterministic_only,
                                bool allow_tensor_math);

// cudnnGetVersion()'s number (9.19.0 is 91900): "" when this build can use it, else why not.
std::string cudnn_version_problem(size_t version);
std::string cudnn_version_text(size_t version);  // "9.19.0"

}  // namespace tk::cuda
