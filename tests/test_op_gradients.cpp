// The op harness's cases and what every op must pass (tests/op_harness.h):
// - gradients: finite differences of every differentiable op in float32 on the cpu; on every other target
//   (float16, bfloat16, other backends) the gradient program must match the cpu float32 one;
// - coverage: every registered backend has a kernel for every (op, float dtype) unless kUnsupported below
//   says why not; every differentiable op has a gradient case and every op a forward case.
//
// To add an op: append a Case to gradient_cases() (differentiable) or extra_forward_cases() (not).
// The forward checks (tests/test_ops_forward.cpp) run every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

#include "backends/cuda/cuda_kernels.h"
#include "op_harness.h"
#include "trainkit/core/convert.h"

namespace tk::graph::harness {
namespace {

// ---------------------------------------------------------------- kernels that may be missing, and why
constexpr uint8_t bit(DType t) { return static_cast<uint8_t>(1u << static_cast<unsigned>(t)); }
constexpr uint8_t kAllFloats = bit(DType::f32) | bit(DType::f16) | bit(DType::bf16);
constexpr uint8_t k16Bit = bit(DType::f16) | bit(DType::bf16);
constexpr uint8_t device_bit(DeviceKind k) { return static_cast<uint8_t>(1u << static_cast<unsigned>(k)); }
constexpr uint8_t kAnyDevice = 0xff;

struct UnsupportedKernel {
  Op op;
  uint8_t devices;  // device_bit()s
  uint8_t dtypes;   // bit()s of the dtype the op computes in
  const char* why;
};

constexpr std::array kUnsupported{
    UnsupportedKernel{Op::Input, kAnyDevice, kAllFloats, "a source: nn::BatchStager writes its memory, no kernel runs"},
    UnsupportedKernel{Op::Variable, kAnyDevice, kAllFloats,
                      "a source: storage bound outside the program, no kernel runs"},
    UnsupportedKernel{Op::View, kAnyDevice, kAllFloats,
                      "memory inside another value (a gradient in its bucket): the planner places it, no kernel runs"},
    UnsupportedKernel{Op::SgdUpdate, kAnyDevice, k16Bit,
                      "updates weights and slots in place: weights and optimizer state stay float32"},
    UnsupportedKernel{Op::AdamUpdate, kAnyDevice, k16Bit,
                      "updates weights and slots in place: weights and optimizer state stay float32"},
    UnsupportedKernel{Op::RmspropUpdate, kAnyDevice, k16Bit,
                      "updates weights and slots in place: weights and optimizer state stay float32"},
    UnsupportedKernel{Op::MultiUpdate, kAnyDevice, k16Bit,
                      "updates weights and slots in place: weights and optimizer state stay float32"},
    UnsupportedKernel{Op::AccumulateGrad, kAnyDevice, k16Bit,
                      "the micro-batch gradient accumulator is optimizer state: float32"},
    UnsupportedKernel{Op::BnUpdateMoving, kAnyDevice, k16Bit,
                      "moving mean and variance are float32 state, updated in place like weights"},
    UnsupportedKernel{Op::Constrain, kAnyDevice, k16Bit,
                      "constrains weights in place after their update: weights stay float32"},
};

// Ops every backend must have in every float dtype: no entry above may name them.
constexpr bool must_have_kernels(Op op) {
  if (is_exact_op(op)) return true;  // Cast, elementwise ops, data movement, activations and their gradients
  switch (op) {
    case Op::MatMul:
    case Op::FusedMatMul:
    case Op::BiasAdd:
    case Op::BiasGrad:     // reductions
    case Op::StepControl:  // over the gradients, whatever their dtype
    case Op::MseLoss:
    case Op::MseLossGrad:
    case Op::BceLoss:
    case Op::BceLossGrad:
    case Op::CceLoss:
    case Op::CceLossGrad:
    case Op::SparseCceLoss:
    case Op::SparseCceLossGrad:
    case Op::BinaryAccuracy:
    case Op::CategoricalAccuracy:
    case Op::SparseCategoricalAccuracy:
    case Op::Reduce:
    case Op::BatchMatMul:
      return true;
    default:
      return false;
  }
}
constexpr bool unsupported_list_is_allowed() {
  for (const UnsupportedKernel& e : kUnsupported)
    if (must_have_kernels(e.op) || e.why == nullptr || e.why[0] == '\0') return false;
  return true;
}
static_assert(unsupported_list_is_allowed(),
              "kUnsupported may not excuse Cast, elementwise ops, activations, Softmax, MatMul, reductions, losses "
              "or metrics, and every entry needs a reason");
static_assert(must_have_kernels(Op::Cast) && must_have_kernels(Op::Softmax) && must_have_kernels(Op::GeluGrad) &&
              must_have_kernels(Op::SparseCceLoss) && !must_have_kernels(Op::SgdUpdate));

}  // namespace

const char* declared_unsupported(DeviceKind device, Op op, DType dtype) {
  for (const UnsupportedKernel& e : kUnsupported)
    if (e.op == op && (e.devices & device_bit(device)) && (e.dtypes & bit(dtype))) return e.why;
  // The CUDA backend's own list of ops it has no kernel for yet (src/backends/cuda/coverage.cpp), in every dtype.
  if (device == DeviceKind::cuda)
    for (const cuda::Excluded& e : cuda::excluded_ops())
      if (e.op == op) return e.why.data();
  return nullptr;
}

namespace {

// ---------------------------------------------------------------- input initializers
void default_init(int, float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> mag(0.1f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) p[i] = sign(gen) ? mag(gen) : -mag(gen);
}
// AffineTransform's transforms (input 1): image 0 rotated by 0.3 rad about its center and shifted, image 1 zoomed by
// 1.3 (reaching past every edge, so each fill mode is read); the images as default_init.
void affine_init(int i, float* p, int64_t n, std::mt19937& g) {
  if (i != 1) return default_init(i, p, n, g);
  const float c = std::cos(0.3f), s = std::sin(0.3f);
  const float t[16] = {c, -s, 1.7f, s, c, -0.9f, 0, 0, 1.3f, 0, -0.8f, 0, 1.3f, -0.55f, 0, 0};
  for (int64_t k = 0; k < n; ++k) p[k] = t[k % 16];
}
void probs_init(int, float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(0.1f, 0.9f);
  for (int64_t i = 0; i < n; ++i) p[i] = u(gen);
}
void uniform(float* p, int64_t n, std::mt19937& gen, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) p[i] = u(gen);
}
// Distinct values 0.1 apart from -2 up (still distinct after rounding to 16 bits: bfloat16's spacing is
// 2^-5 below 8), so a finite-difference step never changes which element is the maximum.
void spaced_init(int i, float* p, int64_t n, std::mt19937& g) {
  if (i != 0) return default_init(i, p, n, g);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  for (int64_t k = 0; k < n; ++k) p[k] = 0.1f * static_cast<float>(perm[static_cast<size_t>(k)]) - 2.0f;
}
InitFn labels_init(int label_input, int64_t classes, bool logits) {
  return [=](int i, float* p, int64_t n, std::mt19937& g) {
    if (i == label_input) {
      for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>((k * 3 + 1) % classes);
    } else if (i == 0 && !logits) {
      probs_init(i, p, n, g);
    } else {
      default_init(i, p, n, g);
    }
  };
}
// Input 0 logits or probabilities, input 1 targets in (0.1, 0.9), others default.
InitFn pred_target_init(bool logits) {
  return [=](int i, float* p, int64_t n, std::mt19937& g) {
    if (i == 1 || (i == 0 && !logits))
      probs_init(i, p, n, g);
    else
      default_init(i, p, n, g);
  };
}
// The listed inputs positive (variances), in [0.5, 1.5].
InitFn positive_init(std::vector<int> positive) {
  return [=](int i, float* p, int64_t n, std::mt19937& g) {
    if (std::find(positive.begin(), positive.end(), i) != positive.end())
      uniform(p, n, g, 0.5f, 1.5f);
    else
      default_init(i, p, n, g);
  };
}

Attrs window(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, std::array<int64_t, 4> pad) {
  Attrs at;
  at.kernel[0] = kh, at.kernel[1] = kw, at.stride[0] = sh, at.stride[1] = sw, at.dilation[0] = dh, at.dilation[1] = dw;
  for (int i = 0; i < 4; ++i) at.pad[i] = pad[static_cast<size_t>(i)];
  return at;
}

// The output shape of op over inputs of these shapes (through the op table's shape rule).
Shape shape_of(Op op, const std::vector<Shape>& inputs, const Attrs& at) {
  Graph g;
  std::vector<int> in;
  for (const Shape& s : inputs) in.push_back(g.placeholder_variable("x", s));
  return g[g.add(op, in, at)].shape;
}

Attrs grouped(Attrs at, int64_t groups) {
  at.groups = groups;
  return at;
}

struct ConvWindow {
  const char* label;
  Shape x, w;
  Attrs at;
};
std::vector<ConvWindow> conv_windows() {
  return {
      {"valid", Shape{2, 5, 4, 3}, Shape{3, 2, 3, 4}, window(3, 2, 1, 1, 1, 1, {0, 0, 0, 0})},
      {"same odd pad", Shape{2, 5, 6, 2}, Shape{3, 2, 2, 3}, window(3, 2, 1, 1, 1, 1, {1, 1, 0, 1})},
      {"stride2", Shape{2, 7, 6, 2}, Shape{3, 3, 2, 2}, window(3, 3, 2, 2, 1, 1, {1, 1, 0, 1})},
      {"dilation2", Shape{1, 7, 7, 2}, Shape{3, 3, 2, 2}, window(3, 3, 1, 1, 2, 2, {2, 2, 2, 2})},
      // Every number different between the axes (kernel, stride, dilation, size): a swapped h and w fails.
      {"stride2x1 dilation1x2", Shape{2, 8, 7, 3}, Shape{3, 2, 3, 4}, window(3, 2, 2, 1, 1, 2, {1, 1, 1, 1})},
      // Grouped (attrs.groups): depthwise with depth_multiplier 2 (DepthwiseConv2D), and 2 groups of 2 channels.
      {"depthwise m2 stride2", Shape{2, 7, 6, 3}, Shape{3, 3, 1, 6},
       grouped(window(3, 3, 2, 2, 1, 1, {1, 1, 0, 1}), 3)},
      {"groups2 dilation2", Shape{1, 7, 7, 4}, Shape{3, 3, 2, 4}, grouped(window(3, 3, 1, 1, 2, 2, {2, 2, 2, 2}), 2)},
      // Depthwise with multiplier 1 over 19 channels (the direct filter gradient's vector loop and its remainder).
      {"depthwise m1 same", Shape{2, 5, 4, 19}, Shape{3, 3, 1, 19},
       grouped(window(3, 3, 1, 1, 1, 1, {1, 1, 1, 1}), 19)},
      // One input channel: the direct kernels of backends/cpu/conv_c1.cpp (a multiple of 16 filters). Last: the
      // tests below take conv_windows().back() as this one.
      {"one channel", Shape{2, 6, 7, 1}, Shape{5, 5, 1, 16}, window(5, 5, 1, 1, 1, 1, {2, 2, 2, 2})}};
}

struct PoolWindow {
  const char* label;
  Shape x;
  Attrs at;
};
std::vector<PoolWindow> max_pool_windows() {
  return {{"2x2", Shape{2, 4, 5, 2}, window(2, 2, 2, 2, 1, 1, {0, 0, 0, 0})},
          {"3x3 s2 same", Shape{2, 5, 6, 2}, window(3, 3, 2, 2, 1, 1, {1, 1, 1, 1})}};
}
std::vector<PoolWindow> avg_pool_windows() {
  return {{"2x2", Shape{2, 4, 4, 3}, window(2, 2, 2, 2, 1, 1, {0, 0, 0, 0})},
          {"3x3 s2 same", Shape{2, 5, 5, 2}, window(3, 3, 2, 2, 1, 1, {1, 1, 1, 1})}};
}

// y = BnApply(x, BnStats(x), gamma, beta): BnApply's gradient includes the path through the batch statistics.
std::vector<int> build_bn_apply(Graph& g, const std::vector<int>& in, const Attrs& at) {
  const int stats = g.add(Op::BnStats, {in[0]}, at, "stats");
  return {g.add(Op::BnApply, {in[0], stats, in[1], in[2]}, at, "y")};
}

}  // namespace

std::vector<Case> gradient_cases() {
  std::vector<Case> c;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Attrs at;
      at.trans_a = ta;
      at.trans_b = tb;
      c.push_back({"MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                   Op::MatMul,
                   {ta ? Shape{4, 3} : Shape{3, 4}, tb ? Shape{5, 4} : Shape{4, 5}},
                   {true, true},
                   at});
    }
  c.push_back({"BiasAdd", Op::BiasAdd, {{3, 5}, {5}}, {true, true}});
  for (bool ta : {false, true}) {  // the fusion pass's op, each epilogue (graph/fuse.h)
    Attrs at;
    at.trans_a = ta;
    at.trans_b = !ta;
    const Shape a = ta ? Shape{4, 3} : Shape{3, 4}, b = ta ? Shape{4, 5} : Shape{5, 4};
    at.epilogue = Op::kCount;
    c.push_back({"FusedMatMul bias ta=" + std::to_string(ta), Op::FusedMatMul, {a, b, {5}}, {true, true, true}, at});
    // relu: biases of +-20 keep every pre-activation at least 4 away from the kink (|a.b| <= 16).
    at.epilogue = Op::Relu;
    c.push_back({"FusedMatMul bias relu ta=" + std::to_string(ta),
                 Op::FusedMatMul,
                 {a, b, {5}},
                 {true, true, true},
                 at,
                 [](int input, float* p, int64_t n, std::mt19937& gen) {
                   default_init(input, p, n, gen);
                   if (input == 2)
                     for (int64_t i = 0; i < n; ++i) p[i] = i % 2 ? -20.0f : 20.0f;
                 }});
    at.epilogue = Op::ReluGrad;  // the mask input (a relu's output) is not differentiated
    c.push_back(
        {"FusedMatMul relu_grad ta=" + std::to_string(ta), Op::FusedMatMul, {a, b, {3, 5}}, {true, true, false}, at});
  }
  c.push_back({"BiasAdd rank3", Op::BiasAdd, {{2, 3, 4}, {4}}, {true, true}});
  c.push_back({"Add", Op::Add, {{3, 4}, {3, 4}}, {true, true}});
  c.push_back({"Add3", Op::Add, {{3, 4}, {3, 4}, {3, 4}}, {true, true, true}});
  c.push_back({"Add1", Op::Add, {{3, 4}}, {true}});
  c.push_back({"Mul", Op::Mul, {{3, 4}, {3, 4}}, {true, true}});
  {
    Attrs at;
    at.scale = 0.75f;
    at.offset = 0.3f;
    c.push_back({"Scale", Op::Scale, {{3, 4}}, {true}, at});
    at.scale = -2.5f;
    at.offset = 0.0f;
    c.push_back({"Scale negative", Op::Scale, {{2, 3, 2}}, {true}, at});
  }
  {
    Attrs at;
    at.shape = Shape{4, 3};
    c.push_back({"Reshape", Op::Reshape, {{2, 6}}, {true}, at});
  }
  c.push_back({"Concat", Op::Concat, {{3, 2}, {3, 4}, {3, 1}}, {true, true, true}});
  c.push_back({"Relu", Op::Relu, {{4, 5}}, {true}});
  c.push_back({"Sigmoid", Op::Sigmoid, {{4, 5}}, {true}});
  c.push_back({"Tanh", Op::Tanh, {{4, 5}}, {true}});
  c.push_back({"Gelu", Op::Gelu, {{4, 5}}, {true}});
  {
    Attrs at;
    at.alpha = 1.0f;
    c.push_back({"Elu", Op::Elu, {{4, 5}}, {true}, at});
    at.alpha = 0.2f;
    c.push_back({"LeakyRelu", Op::LeakyRelu, {{4, 5}}, {true}, at});
  }
  c.push_back({"Softmax", Op::Softmax, {{3, 6}}, {true}});
  // Conv2D is linear in each input, so a large step costs no truncation error and beats float rounding.
  for (const ConvWindow& w : conv_windows()) {
    Case cc{std::string("Conv2D ") + w.label, Op::Conv2D, {w.x, w.w}, {true, true}, w.at};
    cc.fd_step = 0.25f;
    c.push_back(cc);
    // Conv2DGradInput as Conv2DTranspose's forward (its gradient rule: Conv2D and Conv2DGradFilter); bilinear too.
    Attrs at = w.at;
    at.shape = w.x;
    Case tc{std::string("Conv2DGradInput (transpose) ") + w.label,
            Op::Conv2DGradInput,
            {shape_of(Op::Conv2D, {w.x, w.w}, w.at), w.w},
            {true, true},
            at};
    tc.fd_step = 0.25f;
    c.push_back(tc);
  }
  // FusedConv2D (the fusion pass's Conv2D + BiasAdd [+ Relu]) on the first window: with the relu, biases of +-100
  // keep every pre-activation away from the kink (|conv| <= 18 terms x 2 x 2 = 72 for inputs in [0.1, 2]).
  for (bool relu : {false, true}) {
    const ConvWindow w = conv_windows().front();
    Attrs at = w.at;
    at.epilogue = relu ? Op::Relu : Op::kCount;
    const Shape bias{w.w[3]};
    Case fc{std::string("FusedConv2D ") + (relu ? "bias relu " : "bias ") + w.label,
            Op::FusedConv2D,
            {w.x, w.w, bias},
            {true, true, true},
            at};
    if (relu)
      fc.init = [](int input, float* p, int64_t n, std::mt19937& gen) {
        default_init(input, p, n, gen);
        if (input == 2)
          for (int64_t i = 0; i < n; ++i) p[i] = i % 2 ? -100.0f : 100.0f;
      };
    fc.fd_step = relu ? 1e-2f : 0.25f;
    c.push_back(fc);
  }
  {
    const ConvWindow w = conv_windows().back();  // one channel
    Attrs at = w.at;
    at.epilogue = Op::kCount;
    Case fc{
        std::string("FusedConv2D bias ") + w.label, Op::FusedConv2D, {w.x, w.w, Shape{w.w[3]}}, {true, true, true}, at};
    fc.fd_step = 0.25f;
    c.push_back(fc);
  }
  for (const PoolWindow& w : max_pool_windows())
    c.push_back({std::string("MaxPool2D ") + w.label, Op::MaxPool2D, {w.x}, {true}, w.at, spaced_init});
  for (const PoolWindow& w : avg_pool_windows())
    c.push_back({std::string("AvgPool2D ") + w.label, Op::AvgPool2D, {w.x}, {true}, w.at});
  c.push_back({"Pad2D", Op::Pad2D, {{2, 3, 2, 2}}, {true}, window(1, 1, 1, 1, 1, 1, {1, 2, 0, 3})});
  c.push_back({"Crop2D", Op::Crop2D, {{2, 5, 6, 2}}, {true}, window(1, 1, 1, 1, 1, 1, {1, 2, 0, 3})});
  {
    Attrs at;
    at.kernel[0] = 2, at.kernel[1] = 3;
    c.push_back({"Upsample2D", Op::Upsample2D, {{2, 2, 3, 2}}, {true}, at});
  }
  for (bool bilinear : {true, false})  // Keras' image affine transform, every fill mode
    for (uint8_t mode = 0; mode < 5; ++mode) {
      Attrs at;
      at.bilinear = bilinear;
      at.fill_mode = mode;
      at.value = 0.5f;
      const char* names[] = {"constant", "nearest", "wrap", "mirror", "reflect"};
      c.push_back({std::string("AffineTransform ") + (bilinear ? "bilinear " : "nearest ") + names[mode],
                   Op::AffineTransform,
                   {{2, 5, 6, 2}, {2, 8}},
                   {true, false},
                   at,
                   affine_init});
    }
  for (bool bilinear : {true, false}) {  // Keras' image resize: up, down, and odd ratios on each axis
    Attrs at;
    at.bilinear = bilinear;
    const std::string kind = bilinear ? "bilinear" : "nearest";
    at.shape = Shape{2, 5, 7, 2};
    c.push_back({"Resize " + kind + " up", Op::Resize, {{2, 3, 4, 2}}, {true}, at});
    at.shape = Shape{1, 4, 2, 3};
    c.push_back({"Resize " + kind + " down", Op::Resize, {{1, 6, 5, 3}}, {true}, at});
    at.shape = Shape{1, 7, 3, 1};
    c.push_back({"Resize " + kind + " mixed", Op::Resize, {{1, 3, 8, 1}}, {true}, at});
  }
  {
    Attrs at;
    at.epsilon = 1e-3f;
    c.push_back({"BnInference",
                 Op::BnInference,
                 {{3, 2, 2, 4}, {4}, {4}, {4}, {4}},
                 {true, false, false, true, true},
                 at,
                 positive_init({2})});
    Case apply{"BnApply through BnStats", Op::BnApply, {{4, 2, 2, 3}, {3}, {3}}, {true, true, true}, at};
    apply.build = build_bn_apply;
    apply.rounds_intermediates = true;
    c.push_back(apply);
  }
  c.push_back({"MseLoss", Op::MseLoss, {{4, 3}, {4, 3}}, {true, false}});
  for (bool logits : {true, false}) {
    Attrs at;
    at.from_logits = logits;
    const std::string sfx = logits ? " logits" : " probs";
    c.push_back({"BceLoss" + sfx, Op::BceLoss, {{4, 3}, {4, 3}}, {true, false}, at, pred_target_init(logits)});
    c.push_back({"CceLoss" + sfx, Op::CceLoss, {{4, 5}, {4, 5}}, {true, false}, at, pred_target_init(logits)});
    c.push_back({"SparseCceLoss" + sfx,
                 Op::SparseCceLoss,
                 {{4, 5}, {4}},
                 {true, false},
                 at,
                 labels_init(1, 5, logits),
                 {std::nullopt, DType::i32}});
  }
  // Cast: y is x rounded to 16 bits, so the steps are large enough that the rounding of y (half an ulp:
  // 2^-10 for float16, 2^-7 for bfloat16 near 2..4) stays far below the tolerance.
  for (DType to : {DType::f16, DType::bf16, DType::f32}) {
    Attrs at;
    at.dtype = to;
    Case cc{"Cast to " + std::string(dtype_name(to)), Op::Cast, {{3, 4}}, {true}, at};
    cc.fd_step = to == DType::bf16 ? 1.0f : 0.25f;
    c.push_back(cc);
  }
  {
    Attrs at;
    at.dtype = DType::f32;
    Case from16{"Cast from float16", Op::Cast, {{3, 4}}, {true}, at, nullptr, {DType::f16}};
    c.push_back(from16);  // perturbations of a float16 input are float16 values: the FD divides by them
    for (DType mid : {DType::f16, DType::bf16}) {
      Case trip{"Cast round trip through " + std::string(dtype_name(mid)), Op::Cast, {{3, 4}}, {true}};
      trip.fd_step = mid == DType::bf16 ? 1.0f : 0.25f;
      trip.build = [mid](Graph& g, const std::vector<int>& in, const Attrs&) {
        Attrs narrow, wide;
        narrow.dtype = mid;
        wide.dtype = g[in[0]].dtype;
        return std::vector<int>{g.add(Op::Cast, {g.add(Op::Cast, {in[0]}, narrow)}, wide, "y")};
      };
      c.push_back(trip);
    }
  }
  for (Case& t : tensor_gradient_cases()) c.push_back(std::move(t));
  for (Case& t : lstm_gradient_cases()) c.push_back(std::move(t));
  for (Case& t : attention_gradient_cases()) c.push_back(std::move(t));
  return c;
}

namespace {

Case loss_grad_case(std::string label, Op op, std::vector<Shape> shapes, bool logits, InitFn init,
                    std::vector<std::optional<DType>> dtypes) {
  Attrs at;
  at.from_logits = logits;
  shapes.push_back(Shape{});  // dy: the float32 loss gradient
  dtypes.resize(shapes.size());
  dtypes.back() = DType::f32;
  return Case{std::move(label), op, std::move(shapes), {}, at, std::move(init), std::move(dtypes)};
}

Case update_case(std::string label, Op op, int operands, UpdateConfig cfg, bool zero_grad = false) {
  Case c{std::move(label), op, std::vector<Shape>(static_cast<size_t>(operands), Shape{3, 4})};
  c.update = std::make_shared<UpdateConfig>(cfg);
  c.attrs.zero_grad = zero_grad;
  // Slots: Adam's v and RMSprop's velocity (input 3 / 2) positive; RMSprop's average gradient small, so a
  // centered denominator stays positive.
  c.init = [op](int i, float* p, int64_t n, std::mt19937& g) {
    if ((op == Op::AdamUpdate && i == 3) || (op == Op::RmspropUpdate && i == 2))
      uniform(p, n, g, 0.5f, 1.5f);
    else if (op == Op::RmspropUpdate && i == 4)
      uniform(p, n, g, -0.1f, 0.1f);
    else
      default_init(i, p, n, g);
  };
  return c;
}

// An update gated on the step's StepControl over its gradient (attrs.gated: the last input).
Case gated_update_case(std::string label, Op op, int operands, UpdateConfig cfg, bool nonfinite_gradient) {
  Case c = update_case(std::move(label), op, operands, cfg);
  c.update->update_op = op;
  c.build = [op](Graph& g, const std::vector<int>& in, const Attrs& at) {
    const int control = g.add(Op::StepControl, {in[1]}, at, "step_control");
    Attrs gated = at;
    gated.gated = true;
    std::vector<int> inputs = in;
    inputs.push_back(control);
    return std::vector<int>{g.add(op, inputs, gated, "update")};
  };
  if (nonfinite_gradient)
    c.init = [init = c.init](int i, float* p, int64_t n, std::mt19937& g) {
      init(i, p, n, g);
      if (i == 1) p[n / 2] = INFINITY;
    };
  return c;
}

std::vector<Case> extra_forward_cases() {
  std::vector<Case> c;
  // Large enough for the parallel paths (32k elements per chunk) and an odd element count.
  c.push_back({"Add big", Op::Add, {{3, 20001}, {3, 20001}}});
  c.push_back({"Sigmoid big", Op::Sigmoid, {{70001}}});
  c.push_back({"BiasGrad", Op::BiasGrad, {{3, 5}}});
  c.push_back({"BiasGrad rank4", Op::BiasGrad, {{2, 3, 2, 4}}});
  {
    Attrs at;
    at.begin = 2;
    at.size = 3;
    c.push_back({"Slice", Op::Slice, {{3, 7}}, {}, at});
  }
  {
    Attrs at;
    c.push_back({"ReluGrad", Op::ReluGrad, {{4, 5}, {4, 5}}, {}, at});
    c.push_back({"SigmoidGrad", Op::SigmoidGrad, {{4, 5}, {4, 5}}, {}, at, pred_target_init(false)});
    c.push_back({"TanhGrad", Op::TanhGrad, {{4, 5}, {4, 5}}, {}, at});
    c.push_back({"GeluGrad", Op::GeluGrad, {{4, 5}, {4, 5}}, {}, at});
    c.push_back({"SoftmaxGrad", Op::SoftmaxGrad, {{3, 6}, {3, 6}}, {}, at, pred_target_init(false)});
    // Rows for CUDA's cooperative row kernels (a block per row from 1024 elements, a warp from 32: launch_geometry.h)
    c.push_back({"SoftmaxGrad long rows", Op::SoftmaxGrad, {{3, 1500}, {3, 1500}}, {}, at, pred_target_init(false)});
    c.push_back({"SoftmaxGrad warp rows", Op::SoftmaxGrad, {{20, 100}, {20, 100}}, {}, at, pred_target_init(false)});
    c.push_back({"Softmax long rows", Op::Softmax, {{3, 1500}}, {}, at});
    c.push_back({"Softmax warp rows", Op::Softmax, {{20, 100}}, {}, at});
    at.alpha = 1.0f;
    c.push_back({"EluGrad", Op::EluGrad, {{4, 5}, {4, 5}}, {}, at});
    at.alpha = 0.2f;
    c.push_back({"LeakyReluGrad", Op::LeakyReluGrad, {{4, 5}, {4, 5}}, {}, at});
  }
  {
    Attrs at;
    at.shape = Shape{3, 4};
    at.value = 0.1f;  // not a 16-bit value: rounds
    c.push_back({"Fill", Op::Fill, {}, {}, at});
    at.value = 70000.0f;  // beyond float16's range: Inf in float16
    c.push_back({"Fill overflow", Op::Fill, {}, {}, at});
  }
  {
    Attrs at;
    at.rate = 0.3f;
    at.seed = 99;
    at.shape = Shape{20, 50};
    Case d{"DropoutMask", Op::DropoutMask, {}, {}, at};
    d.ctx_step = 5;
    c.push_back(d);
    at.spatial = true;
    at.shape = Shape{4, 3, 3, 5};
    d = Case{"DropoutMask spatial", Op::DropoutMask, {}, {}, at};
    d.ctx_step = 2;
    c.push_back(d);
  }
  {  // float32 whatever the dtype under test (the layers cast after drawing)
    Attrs at;
    at.seed = 7;
    at.shape = Shape{30, 40};
    for (Op op : {Op::RandomUniform, Op::RandomNormal}) {
      Case r{op == Op::RandomUniform ? "RandomUniform" : "RandomNormal", op, {}, {}, at};
      r.ctx_step = 3;
      c.push_back(r);
    }
  }
  for (const ConvWindow& w : conv_windows()) {
    const Shape y = shape_of(Op::Conv2D, {w.x, w.w}, w.at);
    Attrs at = w.at;
    at.shape = w.x;
    c.push_back({std::string("Conv2DGradInput ") + w.label, Op::Conv2DGradInput, {y, w.w}, {}, at});
    at.shape = w.w;
    c.push_back({std::string("Conv2DGradFilter ") + w.label, Op::Conv2DGradFilter, {w.x, y}, {}, at});
  }
  {
    std::vector<PoolWindow> windows = max_pool_windows();
    Attrs global = window(3, 3, 3, 3, 1, 1, {0, 0, 0, 0});
    global.split_ties = true;  // GlobalMaxPooling2D: dy shared among tied maxima
    windows.push_back({"global split ties", Shape{2, 3, 3, 2}, global});
    for (const PoolWindow& w : windows) {
      const Shape y = shape_of(Op::MaxPool2D, {w.x}, w.at);
      Case mp{std::string("MaxPool2DGrad ") + w.label, Op::MaxPool2DGrad, {y, w.x}, {}, w.at};
      mp.init = [ties = w.at.split_ties](int i, float* p, int64_t n, std::mt19937& g) {
        if (i == 1 && ties) {  // three levels: many tied maxima
          std::uniform_int_distribution<int> level(0, 2);
          for (int64_t k = 0; k < n; ++k) p[k] = 0.5f * static_cast<float>(level(g));
        } else {
          default_init(i, p, n, g);
        }
      };
      mp.build = [](Graph& g, const std::vector<int>& in, const Attrs& at) {
        const int y = g.add(Op::MaxPool2D, {in[1]}, at, "pool");
        return std::vector<int>{g.add(Op::MaxPool2DGrad, {in[0], in[1], y}, at, "y")};
      };
      c.push_back(mp);
    }
  }
  for (const PoolWindow& w : avg_pool_windows()) {
    Attrs at = w.at;
    at.shape = w.x;
    c.push_back(
        {std::string("AvgPool2DGrad ") + w.label, Op::AvgPool2DGrad, {shape_of(Op::AvgPool2D, {w.x}, w.at)}, {}, at});
  }
  {
    Attrs at;
    at.kernel[0] = 2, at.kernel[1] = 3;
    at.shape = Shape{2, 2, 3, 2};
    c.push_back({"Upsample2DGrad", Op::Upsample2DGrad, {{2, 4, 9, 2}}, {}, at});
  }
  for (bool bilinear : {true, false}) {
    Attrs at;
    at.bilinear = bilinear;
    at.fill_mode = 4;  // reflect, Keras' default
    c.push_back({std::string("AffineTransformGrad ") + (bilinear ? "bilinear" : "nearest"),
                 Op::AffineTransformGrad,
                 {{2, 5, 6, 2}, {2, 8}},
                 {},
                 at,
                 affine_init});
  }
  for (bool bilinear : {true, false}) {
    Attrs at;
    at.bilinear = bilinear;
    at.shape = Shape{1, 3, 8, 2};
    c.push_back(
        {std::string("ResizeGrad ") + (bilinear ? "bilinear" : "nearest"), Op::ResizeGrad, {{1, 7, 3, 2}}, {}, at});
  }
  {
    Attrs at;
    at.epsilon = 1e-3f;
    at.momentum = 0.9f;
    c.push_back({"BnStats", Op::BnStats, {{4, 2, 2, 3}}, {}, at});
    Case ig{"BnInputGrad", Op::BnInputGrad, {{4, 2, 2, 3}, {4, 2, 2, 3}, {3}}, {}, at};
    ig.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::BnStats, {in[1]}, a, "stats");
      return std::vector<int>{g.add(Op::BnInputGrad, {in[0], in[1], stats, in[2]}, a, "y")};
    };
    ig.rounds_intermediates = true;
    c.push_back(ig);
    Case gg{"BnGammaGrad", Op::BnGammaGrad, {{4, 2, 2, 3}, {4, 2, 2, 3}}, {}, at};
    gg.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::BnStats, {in[1]}, a, "stats");
      return std::vector<int>{g.add(Op::BnGammaGrad, {in[0], in[1], stats}, a, "y")};
    };
    gg.rounds_intermediates = true;
    c.push_back(gg);
    c.push_back({"BnInferenceGrad", Op::BnInferenceGrad, {{3, 2, 2, 4}, {4}, {4}}, {}, at, positive_init({1})});
    c.push_back({"BnInferenceGammaGrad",
                 Op::BnInferenceGammaGrad,
                 {{3, 2, 2, 4}, {3, 2, 2, 4}, {4}, {4}},
                 {},
                 at,
                 positive_init({3})});
    Case um{"BnUpdateMoving", Op::BnUpdateMoving, {{6, 3}, {3}, {3}}, {}, at, positive_init({2})};
    um.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::BnStats, {in[0]}, a, "stats");
      return std::vector<int>{g.add(Op::BnUpdateMoving, {stats, in[1], in[2]}, a, "update")};
    };
    um.rounds_intermediates = true;
    c.push_back(um);
    // 300 rows: on CUDA the per-channel sums run in 4 chunks of rows (up to 127 rows they are one chunk).
    const Shape tall{3, 100, 5};
    c.push_back({"BnStats 300 rows", Op::BnStats, {tall}, {}, at});
    Case ig_tall = ig, gg_tall = gg;
    ig_tall.label = "BnInputGrad 300 rows", ig_tall.inputs = {tall, tall, {5}};
    gg_tall.label = "BnGammaGrad 300 rows", gg_tall.inputs = {tall, tall};
    c.push_back(ig_tall);
    c.push_back(gg_tall);
    c.push_back({"BnInferenceGammaGrad 300 rows",
                 Op::BnInferenceGammaGrad,
                 {tall, tall, {5}, {5}},
                 {},
                 at,
                 positive_init({3})});
  }
  c.push_back(loss_grad_case("MseLossGrad", Op::MseLossGrad, {{4, 3}, {4, 3}}, false, nullptr, {}));
  for (bool logits : {true, false}) {
    const std::string sfx = logits ? " logits" : " probs";
    c.push_back(
        loss_grad_case("BceLossGrad" + sfx, Op::BceLossGrad, {{4, 3}, {4, 3}}, logits, pred_target_init(logits), {}));
    c.push_back(
        loss_grad_case("CceLossGrad" + sfx, Op::CceLossGrad, {{4, 5}, {4, 5}}, logits, pred_target_init(logits), {}));
    c.push_back(loss_grad_case("SparseCceLossGrad" + sfx, Op::SparseCceLossGrad, {{4, 5}, {4}}, logits,
                               labels_init(1, 5, logits), {std::nullopt, DType::i32}));
  }
  c.push_back({"BinaryAccuracy", Op::BinaryAccuracy, {{6, 3}, {6, 3}}, {}, {}, pred_target_init(false)});
  c.push_back({"CategoricalAccuracy", Op::CategoricalAccuracy, {{6, 5}, {6, 5}}});
  c.push_back({"SparseCategoricalAccuracy",
               Op::SparseCategoricalAccuracy,
               {{6, 5}, {6}},
               {},
               {},
               labels_init(1, 5, true),
               {std::nullopt, DType::i32}});
  {
    // Each update op takes only the slots its config uses (graph::update_slot_mask): SGD without momentum none,
    // RMSprop its velocity, then the momentum (momentum > 0), then the average gradient (centered).
    UpdateConfig sgd;
    sgd.learning_rate = 0.1f;
    c.push_back(update_case("SgdUpdate", Op::SgdUpdate, 2, sgd));
    sgd.momentum = 0.9f;
    c.push_back(update_case("SgdUpdate momentum", Op::SgdUpdate, 3, sgd));
    sgd.nesterov = true;
    sgd.clipnorm = 1.0f;
    sgd.weight_decay = 0.01f;
    c.push_back(update_case("SgdUpdate nesterov clipnorm decay", Op::SgdUpdate, 3, sgd));
    UpdateConfig clip;
    clip.learning_rate = 0.1f;
    clip.clipvalue = 0.5f;
    c.push_back(update_case("SgdUpdate clipvalue zero_grad", Op::SgdUpdate, 2, clip, true));
    UpdateConfig adam;
    adam.iterations = 3;
    c.push_back(update_case("AdamUpdate", Op::AdamUpdate, 4, adam));
    adam.weight_decay = 0.004f;
    adam.clipnorm = 0.5f;
    c.push_back(update_case("AdamUpdate AdamW clipnorm", Op::AdamUpdate, 4, adam));
    UpdateConfig rms;
    c.push_back(update_case("RmspropUpdate", Op::RmspropUpdate, 3, rms));
    rms.momentum = 0.9f;
    c.push_back(update_case("RmspropUpdate momentum", Op::RmspropUpdate, 4, rms));  // (velocity, momentum)
    rms.centered = true;
    c.push_back(update_case("RmspropUpdate centered momentum", Op::RmspropUpdate, 5, rms));
    {  // MultiUpdate: Adam over three variables of different sizes, one of them large enough to be split between
       // threads mid-variable (tests/test_fuse.cpp checks it bit for bit against one AdamUpdate per variable)
      const std::vector<Shape> shapes{{3, 4}, {5}, {70001}};
      Case mu{"MultiUpdate Adam clipnorm", Op::MultiUpdate, {}};
      for (int part = 0; part < 4; ++part)  // params, grads, m, v (slots weight-major: m0 v0 m1 v1 ...)
        for (size_t v = 0; v < shapes.size(); ++v) mu.inputs.push_back(shapes[v]);
      // Reorder the slot shapes to weight-major (both slots of a variable share its shape).
      for (size_t v = 0; v < shapes.size(); ++v) mu.inputs[6 + 2 * v] = mu.inputs[7 + 2 * v] = shapes[v];
      UpdateConfig cfg = adam;
      mu.update = std::make_shared<UpdateConfig>(cfg);
      mu.attrs.size = 3;
      mu.attrs.epilogue = Op::AdamUpdate;
      mu.init = [](int i, float* p, int64_t n, std::mt19937& g) {
        if (i >= 6 && (i - 6) % 2 == 1)
          uniform(p, n, g, 0.5f, 1.5f);  // v: positive
        else
          default_init(i, p, n, g);
      };
      c.push_back(mu);
    }
    UpdateConfig global;
    global.learning_rate = 0.1f;
    global.global_clipnorm = 0.5f;
    c.push_back(gated_update_case("SgdUpdate gated global_clipnorm", Op::SgdUpdate, 2, global, false));
    UpdateConfig skip;
    skip.skip_nonfinite = true;
    c.push_back(gated_update_case("AdamUpdate gated skips a nonfinite step", Op::AdamUpdate, 4, skip, true));
    // StepControl over gradients of several shapes: [1 when all are finite (or the check is off), the
    // global-norm clip factor].
    UpdateConfig control;
    control.global_clipnorm = 1.0f;
    control.skip_nonfinite = true;
    Case sc{"StepControl", Op::StepControl, {{3, 4}, {5}, {2, 2, 2}}};
    sc.update = std::make_shared<UpdateConfig>(control);
    c.push_back(sc);
    sc.label = "StepControl nonfinite";
    sc.init = [](int i, float* p, int64_t n, std::mt19937& g) {
      default_init(i, p, n, g);
      if (i == 1) p[2] = INFINITY;
    };
    c.push_back(sc);
    // The dtype rule takes gradients of several floating dtypes at once (mixed precision).
    sc.label = "StepControl mixed dtypes";
    sc.init = nullptr;
    sc.dtypes = {std::nullopt, DType::f16, DType::bf16};
    c.push_back(sc);
    Case acc{"AccumulateGrad", Op::AccumulateGrad, {{3, 4}, {3, 4}}};
    acc.grad_scale = 0.25f;
    c.push_back(acc);
    // Data parallel's gradient all-reduce without a group (one replica): the gradient times this replica's share.
    Case all_reduce{"AllReduce one replica", Op::AllReduce, {{3, 4}}};
    all_reduce.grad_scale = 0.25f;
    c.push_back(all_reduce);
    // A bucket of two gradients (graph/bucket.h): both packed into one flat output at 64-byte offsets, scaled.
    Case bucket{"AllReduce bucket one replica", Op::AllReduce, {{3, 4}, {5}}};
    bucket.grad_scale = 0.5f;
    c.push_back(bucket);
  }
  for (DType to : {DType::i32, DType::u8, DType::boolean}) {
    Attrs at;
    at.dtype = to;
    c.push_back({"Cast to " + std::string(dtype_name(to)),
                 Op::Cast,
                 {{3, 4}},
                 {},
                 at,
                 [](int, float* p, int64_t n, std::mt19937& g) {
                   uniform(p, n, g, -300.0f, 300.0f);  // truncation, saturation of uint8, zeros are rare
                   p[0] = 0.0f;
                 }});
  }
  for (DType from : {DType::i32, DType::u8}) {
    Case cc{"Cast " + std::string(dtype_name(from)) + " to the dtype",
            Op::Cast,
            {{3, 4}},
            {},
            {},
            [](int, float* p, int64_t n, std::mt19937& g) { uniform(p, n, g, 0.0f, 255.0f); },
            {from}};
    cc.cast_to_under_test = true;
    c.push_back(cc);
  }
  for (Case& t : tensor_forward_cases()) c.push_back(std::move(t));
  for (Case& t : lstm_forward_cases()) c.push_back(std::move(t));
  for (Case& t : attention_forward_cases()) c.push_back(std::move(t));
  return c;
}

}  // namespace

std::vector<Case> forward_cases() {
  std::vector<Case> c = gradient_cases();
  for (Case& x : extra_forward_cases()) c.push_back(std::move(x));
  return c;
}

Case find_case(const std::string& label) {
  for (Case& c : forward_cases())
    if (c.label == label) return c;
  throw InvalidArgument("no op harness case '" + label + "'");
}

namespace {

// ---------------------------------------------------------------- coverage
TEST(OpCoverage, EveryDifferentiableOpHasAGradientCase) {
  std::set<Op> covered;
  for (const Case& c : gradient_cases()) {
    EXPECT_TRUE(std::count(c.differentiable.begin(), c.differentiable.end(), true) > 0) << c.label;
    covered.insert(c.op);
  }
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    if (info.grad)
      EXPECT_TRUE(covered.count(info.op)) << info.name << " has a gradient rule but no case in gradient_cases()";
  }
}

TEST(OpCoverage, EveryOpHasAForwardCase) {
  std::set<Op> covered;
  for (const Case& c : forward_cases()) covered.insert(c.op);
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    if (op == Op::Input || op == Op::Variable) continue;  // sources: Variables are the leaves of every case
    // View runs nothing; AllReduceWait reads a started AllReduce, not a Variable: tests/test_bucket.cpp checks both
    if (op == Op::View || op == Op::AllReduceWait) continue;
    EXPECT_TRUE(covered.count(op)) << op_name(op) << " has no case in forward_cases()";
  }
}

TEST(OpCoverage, CaseLabelsAreUnique) {
  std::set<std::string> seen;
  for (const Case& c : forward_cases()) EXPECT_TRUE(seen.insert(param_name(c.label)).second) << c.label;
}

// Backends register kernels under signature_for(op, dtype); a node of the op over inputs of that dtype must
// have exactly that signature (the dtype rule's output dtype too), or no node would ever find those kernels.
TEST(OpCoverage, SignatureForIsTheSignatureOfANodeInThatDType) {
  for (const Case& c : forward_cases()) {
    if (c.op == Op::Cast || c.cast_to_under_test || c.extra_signature) continue;  // their own signatures
    for (DType t : kFloatDTypes) {
      const Instance inst(c, Target{DeviceKind::cpu, t}, convert_inputs(c, generate_inputs(c, 1), t));
      const KernelSignature node = signature_of(inst.g, inst.checked[0]), usual = signature_for(c.op, t);
      EXPECT_TRUE(node == usual) << c.label << ": signature_for(" << op_name(c.op) << ", " << dtype_name(t) << ") is "
                                 << usual.to_string() << " but the node's signature is " << node.to_string()
                                 << ": kernels registered under signature_for never match a node";
    }
  }
}

// Every registered backend has a kernel for every op in float32, float16 and bfloat16 (Cast: between every
// two of them), unless kUnsupported says why not; and no entry of kUnsupported is stale.
TEST(OpCoverage, EveryBackendHasEveryKernelOrDeclaresWhyNot) {
  int checked = 0;
  for (DeviceKind kind : backend_kinds()) {
    const std::string dev = Device{kind, 0}.to_string();
    for (int i = 0; i < kOpCount; ++i) {
      const auto op = static_cast<Op>(i);
      for (DType t : kFloatDTypes) {
        std::vector<KernelSignature> sigs;
        if (op == Op::Cast)
          for (DType to : kFloatDTypes) sigs.push_back(KernelSignature({t}, to));
        else
          sigs.push_back(signature_for(op, t));
        const char* why = declared_unsupported(kind, op, t);
        for (const KernelSignature& sig : sigs) {
          ++checked;
          const bool has = has_kernel(kind, op, sig);
          EXPECT_TRUE(has || why)
              << dev << " has no kernel for " << op_name(op) << " " << sig.to_string()
              << ": add one, or declare it in kUnsupported (tests/test_op_gradients.cpp) with a reason";
          EXPECT_FALSE(has && why) << dev << " has a kernel for " << op_name(op) << " " << sig.to_string()
                                   << " that kUnsupported declares missing (\"" << why << "\"): remove the entry";
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// ---------------------------------------------------------------- gradients
Tensor random_r(const Shape& s, uint32_t seed) {
  std::mt19937 gen(seed);
  Tensor r = Tensor::zeros(s);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t k = 0; k < r.numel(); ++k) r.data<float>()[k] = u(gen);
  return r;
}

// Element k of a host tensor of a floating dtype, as float; set() stores v (rounded to the dtype) and
// returns the value actually stored.
float get(const Tensor& t, int64_t k) {
  float v;
  convert_elements(static_cast<const char*>(t.raw()) + static_cast<size_t>(k) * dtype_size(t.dtype()), t.dtype(), &v,
                   DType::f32, 1);
  return v;
}
float set(Tensor& t, int64_t k, float v) {
  convert_elements(&v, DType::f32, static_cast<char*>(t.raw()) + static_cast<size_t>(k) * dtype_size(t.dtype()),
                   t.dtype(), 1);
  return get(t, k);
}

}  // namespace

void check_finite_differences(const Case& tc) {
  const Target cpu{DeviceKind::cpu, DType::f32};
  std::vector<Tensor> inputs = convert_inputs(tc, generate_inputs(tc, 7), DType::f32);
  Instance fwd(tc, cpu, inputs);  // both bind the tensors in `inputs`: perturbing them moves both
  Instance grad(tc, cpu, inputs);
  const int y = fwd.checked[0];
  const Tensor r = random_r(fwd.g[y].shape, 11).to(fwd.g[y].dtype);
  const std::vector<int> dx = grad.append_gradients(r);
  std::vector<int> outputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (tc.differentiable[i]) {
      ASSERT_GE(dx[i], 0) << "no gradient for input " << i;
      ASSERT_EQ(grad.g[dx[i]].shape, tc.inputs[i]) << "gradient shape of input " << i;
      ASSERT_EQ(grad.g[dx[i]].dtype, inputs[i].dtype()) << "gradient dtype of input " << i;
      outputs.push_back(dx[i]);
    }
  auto gp = grad.program(outputs);
  auto forward = fwd.program({y});
  const ExecContext ctx = fwd.context();
  gp->run(ctx);
  const Tensor rf = host_f32(r);
  auto objective = [&]() {
    forward->run(ctx);
    const Tensor yv = host_f32(forward->output(y));
    double s = 0;
    for (int64_t k = 0; k < yv.numel(); ++k) s += double(yv.data<float>()[k]) * double(rf.data<float>()[k]);
    return s;
  };
  int checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!tc.differentiable[i]) continue;
    const Tensor analytic = host_f32(gp->output(dx[i]));
    Tensor& x = inputs[i];
    for (int64_t k = 0; k < x.numel(); ++k) {
      const float saved = get(x, k);
      const float h = tc.fd_step * std::max(1.0f, std::abs(saved));
      const float hi = set(x, k, saved + h);
      const double up = objective();
      const float lo = set(x, k, saved - h);
      const double down = objective();
      set(x, k, saved);
      const double numeric = (up - down) / (double(hi) - double(lo));
      EXPECT_NEAR(analytic.data<float>()[k], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << tc.label << ": d/dx" << i << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

namespace {

class OpGradient : public ::testing::TestWithParam<Case> {};

TEST_P(OpGradient, MatchesCentralDifferences) { check_finite_differences(GetParam()); }

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradient, ::testing::ValuesIn(gradient_cases()),
                         [](const auto& info) { return param_name(info.param.label); });

std::vector<Target> non_reference_targets() {
  std::vector<Target> t;
  for (const Target& x : targets())
    if (!x.is_reference()) t.push_back(x);
  return t;
}

}  // namespace

void check_gradient_parity(const Case& tc, Target target, std::string* skipped, const Case* reference) {
  const std::vector<Tensor> test_in = convert_inputs(tc, generate_inputs(tc, 7), target.dtype);
  Instance test(tc, target, test_in);
  Instance ref(reference ? *reference : tc, Target{}, convert_inputs(tc, test_in, DType::f32));
  const int y = test.checked[0];
  const Tensor r_test = random_r(test.g[y].shape, 11).to(test.g[y].dtype);
  const std::vector<int> dx_test = test.append_gradients(r_test);
  const std::vector<int> dx_ref = ref.append_gradients(r_test.to(ref.g[ref.checked[0]].dtype));
  if (auto why = skip_reason(test)) {
    *skipped = *why;
    return;
  }
  std::vector<int> out_test, out_ref;
  for (size_t i = 0; i < dx_test.size(); ++i)
    if (dx_test[i] >= 0 || dx_ref[i] >= 0) {
      ASSERT_TRUE(dx_test[i] >= 0 && dx_ref[i] >= 0) << "input " << i << " has a gradient in one dtype only";
      ASSERT_EQ(test.g[dx_test[i]].dtype, test_in[i].dtype()) << "gradient dtype of input " << i;
      out_test.push_back(dx_test[i]);
      out_ref.push_back(dx_ref[i]);
    }
  ASSERT_FALSE(out_test.empty());
  auto pt = test.program(out_test);
  auto pr = ref.program(out_ref);
  pt->run(test.context());
  pr->run(ref.context());
  const double tol = tolerance(target.dtype).gradient;
  for (size_t k = 0; k < out_test.size(); ++k) {
    const double e = expect_close(pt->output(out_test[k]), pr->output(out_ref[k]), tol,
                                  tc.label + " on " + target.name() + ": gradient " + std::to_string(k));
    ::testing::Test::RecordProperty("error" + std::to_string(k), std::to_string(e));
  }
}

namespace {

class OpGradientParity : public ::testing::TestWithParam<std::tuple<Case, Target>> {};

TEST_P(OpGradientParity, MatchesCpuFloat32) {
  std::string skipped;
  check_gradient_parity(std::get<0>(GetParam()), std::get<1>(GetParam()), &skipped);
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradientParity,
                         ::testing::Combine(::testing::ValuesIn(gradient_cases()),
                                            ::testing::ValuesIn(non_reference_targets())),
                         [](const auto& info) {
                           return param_name(std::get<0>(info.param).label + "_" + std::get<1>(info.param).name());
                         });

// ---------------------------------------------------------------- autodiff over a small network
void fill_default(Tensor& t, std::mt19937& gen) { default_init(0, t.data<float>(), t.numel(), gen); }

// A small DAG with fan-out (a value used three times).
TEST(Autodiff, TwoLayerNetworkWithFanOutMatchesFiniteDifferences) {
  Tensor w1 = Tensor::zeros({4, 6}), b1 = Tensor::zeros({6}), w2 = Tensor::zeros({6, 3}), xs = Tensor::zeros({5, 4});
  std::mt19937 gen(3);
  for (Tensor* t : {&w1, &b1, &w2, &xs}) fill_default(*t, gen);
  Tensor labels = Tensor::from_vector<int32_t>({5}, {0, 1, 2, 0, 1});
  Graph g;
  int x = g.variable("x", xs);
  int label = g.variable("y", labels);
  int vw1 = g.variable("w1", w1), vb1 = g.variable("b1", b1), vw2 = g.variable("w2", w2);
  int h = g.add(Op::Tanh, {g.add(Op::BiasAdd, {g.add(Op::MatMul, {x, vw1}), vb1})});
  int h2 = g.add(Op::Add, {h, g.add(Op::Mul, {h, h})});  // h used three times
  Attrs logits;
  logits.from_logits = true;
  int loss = g.add(Op::SparseCceLoss, {g.add(Op::MatMul, {h2, vw2}), label}, logits);
  std::vector<int> grads = gradients(g, {loss}, {vw1, vb1, vw2});
  Program p(std::move(g), {loss, grads[0], grads[1], grads[2]}, {}, Device::cpu());
  ExecContext ctx;
  p.run(ctx);
  std::vector<Tensor*> vars{&w1, &b1, &w2};
  for (size_t v = 0; v < vars.size(); ++v) {
    const Tensor analytic = p.output(grads[v]);
    float* w = vars[v]->data<float>();
    for (int64_t k = 0; k < vars[v]->numel(); ++k) {
      const float saved = w[k], step = 1e-2f;
      w[k] = saved + step;
      p.run(ctx);
      const double up = p.output_scalar(loss);
      w[k] = saved - step;
      p.run(ctx);
      const double down = p.output_scalar(loss);
      w[k] = saved;
      const float a = analytic.data<float>()[k];
      EXPECT_NEAR(a, (up - down) / (2 * step), 2e-3 + 1e-2 * std::abs(a)) << "var " << v << " elem " << k;
    }
  }
}

TEST(Autodiff, ValuesThatDoNotReachTheLossGetNoGradient) {
  Tensor w = Tensor::zeros({3, 2}), unused = Tensor::zeros({2});
  Graph g;
  int x = g.input("x", {4, 3});
  int t = g.input("t", {4, 2});
  int vw = g.variable("w", w), vu = g.variable("u", unused);
  int loss = g.add(Op::MseLoss, {g.add(Op::MatMul, {x, vw}), t});
  std::vector<int> grads = gradients(g, {loss}, {vw, vu});
  EXPECT_GE(grads[0], 0);
  EXPECT_EQ(grads[1], -1);
}

// Nothing flows into an integer value through a Cast; a float16 variable gets a float16 gradient.
TEST(Autodiff, CastGradientGoesBackToTheSourceDType) {
  Tensor ints = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor halves = Tensor::from_vector<float>({2, 3}, {0.5f, -1, 2, 0.25f, 3, -4}).to(DType::f16);
  Tensor target = Tensor::zeros({2, 3});
  Graph g;
  int vi = g.variable("i", ints), vh = g.variable("h", halves), vt = g.variable("t", target);
  int sum = g.add(Op::Add, {g.cast(vi, DType::f32), g.cast(vh, DType::f32)});
  int loss = g.add(Op::MseLoss, {sum, vt});
  std::vector<int> grads = gradients(g, {loss}, {vi, vh});
  EXPECT_EQ(grads[0], -1) << "an int32 source gets no gradient";
  ASSERT_GE(grads[1], 0);
  EXPECT_EQ(g[grads[1]].dtype, DType::f16);
  EXPECT_EQ(g[grads[1]].op, Op::Cast);
  Program p(std::move(g), {grads[1]}, {}, Device::cpu());
  p.run(ExecContext{});
  // d/dh mean((i + h)^2) = 2 / 6 (i + h) (as MseLossGrad computes it in float32), rounded to float16.
  const Tensor got = p.output(grads[1]);
  const std::vector<float> h{0.5f, -1, 2, 0.25f, 3, -4};
  for (int k = 0; k < 6; ++k) {
    const float want = 2.0f * (1.0f / 6.0f) * (float(k + 1) + h[static_cast<size_t>(k)]);
    EXPECT_EQ(got.data<float16>()[k].bits, float16::from_float(want).bits) << k;
  }
}

}  // namespace
}  // namespace tk::graph::harness
