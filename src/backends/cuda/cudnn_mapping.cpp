// cudnn_mapping.h: trainkit's convolutions as cuDNN descriptors, the workspace split and the algorithm choice.
#include "backends/cuda/cudnn_mapping.h"

#include <limits>

#include "trainkit/runtime/memory.h"

namespace tk::cuda {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int>::max();
int narrow(int64_t v) { return static_cast<int>(v); }
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

bool usable(const AlgoCandidate& a, bool deterministic_only, bool allow_tensor_math) {
  return a.ok && !a.converts && (a.deterministic || !deterministic_only) && (!a.tensor_math || allow_tensor_math);
}
bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace

CudnnTensor4d nhwc_descriptor(int64_t n, int64_t c, int64_t h, int64_t w) {
  return {narrow(n), narrow(c), narrow(h), narrow(w), narrow(h * w * c), 1, narrow(w * c), narrow(c)};
}

std::string cudnn_unsupported(const graph::Window& g, int64_t filters) {
  if (g.pt != g.pb || g.pl != g.pr)
    return "asymmetric padding (top " + std::to_string(g.pt) + ", bottom " + std::to_string(g.pb) + ", left " +
           std::to_string(g.pl) + ", right " + std::to_string(g.pr) + "): cuDNN pads both sides of an axis alike";
  if (g.n <= 0 || g.c <= 0 || filters <= 0 || g.oh <= 0 || g.ow <= 0 || g.kh <= 0 || g.kw <= 0)
    return "an empty convolution (no images, channels, filters or output pixels)";
  const int64_t x = g.n * g.h * g.w * g.c, y = g.n * g.oh * g.ow * filters, w = g.kh * g.kw * g.c * filters;
  if (x > kIntMax || y > kIntMax || w > kIntMax || g.sh > kIntMax || g.pt > kIntMax || g.dh > kIntMax ||
      g.sw > kIntMax || g.pl > kIntMax || g.dw > kIntMax)
    return "a tensor of 2^31 elements or more (cuDNN's descriptors index with int)";
  return "";
}

CudnnConvDims cudnn_dims(const graph::Window& g, int64_t filters, int64_t groups) {
  CudnnConvDims d;
  d.x = nhwc_descriptor(g.n, g.c, g.h, g.w);
  d.y = nhwc_descriptor(g.n, filters, g.oh, g.ow);
  d.k = narrow(filters);
  d.c = narrow(g.c / groups);
  d.groups = narrow(groups);
  d.r = narrow(g.kh);
  d.s = narrow(g.kw);
  d.pad_h = narrow(g.pt);
  d.pad_w = narrow(g.pl);
  d.stride_h = narrow(g.sh);
  d.stride_w = narrow(g.sw);
  d.dilation_h = narrow(g.dh);
  d.dilation_w = narrow(g.dw);
  return d;
}

CudnnConvTypes cudnn_conv_types(DType t) {
  CudnnConvTypes c;
  if (!is_16bit(t)) return c;  // float32 data and compute
  c.data = t == DType::f16 ? CudnnType::float16 : CudnnType::bfloat16;
  c.element_bytes = 2;
  c.tensor_math = true;
  return c;
}

std::string native16_conv_unsupported(std::span<const DType> inputs, DType output, bool enabled) {
  if (!enabled) return "TK_CUDA_NATIVE16=0";
  if (!is_16bit(output))
    return std::string("a ") + std::string(dtype_name(output)) + " output (cuDNN writes the inputs' 16-bit dtype)";
  for (DType t : inputs)
    if (t != output)
      return std::string("a ") + std::string(dtype_name(t)) + " input with a " + std::string(dtype_name(output)) +
             " output (cuDNN takes one dtype for x, the filter and y)";
  return "";
}

CudnnWorkspace cudnn_workspace(size_t planned, int64_t filter_elements, size_t element_bytes) {
  CudnnWorkspace w;
  const size_t worst_misalignment = kCudnnAlignment - kWorkspaceBaseAlignment;
  w.filter_bytes = static_cast<size_t>(filter_elements) * element_bytes;
  w.cudnn_offset = round_up(w.filter_bytes, kCudnnAlignment);
  if (planned < worst_misalignment || planned - worst_misalignment < w.cudnn_offset) return w;
  w.fits = true;
  w.cudnn_bytes = planned - worst_misalignment - w.cudnn_offset;
  return w;
}

namespace {
int first_usable_from(const std::vector<AlgoCandidate>& ranked, size_t from, size_t limit, bool deterministic_only,
                      bool allow_tensor_math) {
  for (size_t i = from; i < ranked.size(); ++i)
    if (usable(ranked[i], deterministic_only, allow_tensor_math) && ranked[i].memory <= limit)
      return static_cast<int>(i);
  return -1;
}
}  // namespace

int choose_algorithm(const std::vector<AlgoCandidate>& ranked, size_t limit, bool deterministic_only,
                     bool allow_tensor_math) {
  return first_usable_from(ranked, 0, limit, deterministic_only, allow_tensor_math);
}

int next_algorithm(const std::vector<AlgoCandidate>& ranked, int refused, size_t limit, bool deterministic_only,
                   bool allow_tensor_math) {
  if (refused < 0) return -1;
  return first_usable_from(ranked, static_cast<size_t>(refused) + 1, limit, deterministic_only, allow_tensor_math);
}

ConvCallOutcome conv_call_outcome(int status) {
  if (status == 0) return ConvCallOutcome::ok;                                // CUDNN_STATUS_SUCCESS
  const int category = status / 1000 * 1000;                                  // CUDNN_STATUS_CATEGORY
  if (category == 2000 || category == 3000) return ConvCallOutcome::refused;  // BAD_PARAM*, NOT_SUPPORTED*
  return ConvCallOutcome::failed;
}

std::string no_algorithm_reason(const std::vector<AlgoCandidate>& ranked, size_t limit, bool deterministic_only,
                                bool allow_tensor_math) {
  int failed = 0, converts = 0, nondeterministic = 0, tf32 = 0, too_big = 0;
  for (const AlgoCandidate& a : ranked) {
    if (!a.ok)
      ++failed;
    else if (a.converts)
      ++converts;
    else if (deterministic_only && !a.deterministic)
      ++nondeterministic;
    else if (a.tensor_math && !allow_tensor_math)
      ++tf32;
    else if (a.memory > limit)
      ++too_big;
  }
  std::string s = std::to_string(ranked.size()) + " candidate" + (ranked.size() == 1 ? "" : "s");
  std::string parts;
  const auto add = [&](int count, const std::string& what) {
    if (count == 0) return;
    parts += (parts.empty() ? ": " : ", ") + std::to_string(count) + " " + what;
  };
  add(failed, "not supported for this shape");
  add(converts, "converting operands to float16 (ALLOW_CONVERSION)");
  add(nondeterministic, "not deterministic (op determinism is on)");
  add(tf32, "using TF32 (TK_ALLOW_TF32 is not 1)");
  add(too_big, "needing more than " + config::format_bytes(limit) + " of workspace");
  return s + parts;
}

std::string cudnn_version_text(size_t version) {
  // cuDNN 9: major * 10000 + minor * 100 + patch; cuDNN 8 and older: major * 1000 + minor * 100 + patch.
  const size_t major = version >= 10000 ? version / 10000 : version / 1000;
  const size_t rest = version >= 10000 ? version % 10000 : version % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

std::string cudnn_version_problem(size_t version) {
  const size_t major = version >= 10000 ? version / 10000 : version / 1000;
  if (major == 9) return "";
  return "cuDNN " + cudnn_version_text(version) +
         " found, but this build needs cuDNN 9 (its legacy convolution API and the 9.x numbering); install "
         "nvidia-cudnn-cu13 (or a cuDNN 9 library) and put its lib directory on LD_LIBRARY_PATH";
}

}  // namespace tk::cuda
