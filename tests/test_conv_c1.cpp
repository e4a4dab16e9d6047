// The direct one-input-channel convolution kernels (backends/cpu/conv_c1.cpp) against a plain reference computed
// here in double, at the tutorial CNN's conv1 shape and at odd ones (asymmetric padding, valid padding, a batch that
// is not a multiple of the filter gradient's image chunk, a row that is not a multiple of the output tile), in
// float32 and bfloat16; the filter gradient's bits on one and on two threads; and which convolutions take it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "backends/cpu/kernels.h"
#include "backends/cpu/threads.h"
#include "graph/program.h"
#include "graph/window.h"
#include "trainkit/core/half.h"

namespace tk::graph {
namespace {

struct Geometry {
  const char* label;
  int64_t n, h, w, kh, kw, f;
  std::array<int64_t, 4> pad;  // top, bottom, left, right
};

Attrs attrs_of(const Geometry& c) {
  Attrs at;
  at.kernel[0] = c.kh, at.kernel[1] = c.kw;
  for (int i = 0; i < 4; ++i) at.pad[i] = c.pad[static_cast<size_t>(i)];
  return at;
}

// Values as the dtype holds them: bfloat16 inputs are rounded first, so the reference sees the kernel's inputs.
std::vector<float> random_values(int64_t n, DType t, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) e = t == DType::bf16 ? bfloat16::from_float(u(gen)).to_float() : u(gen);
  return v;
}

Tensor tensor_of(const Shape& s, const std::vector<float>& v, DType t) {
  Tensor out(s, t);
  for (int64_t i = 0; i < s.numel(); ++i) {
    if (t == DType::bf16)
      out.data<bfloat16>()[i] = bfloat16::from_float(v[static_cast<size_t>(i)]);
    else
      out.data<float>()[i] = v[static_cast<size_t>(i)];
  }
  return out;
}

std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = t.dtype() == DType::bf16 ? t.data<bfloat16>()[i].to_float() : t.data<float>()[i];
  return v;
}

// x(N, H, W, 1) at (n, r, c), zero outside.
double pixel(const std::vector<float>& x, const Window& g, int64_t n, int64_t r, int64_t c) {
  if (r < 0 || r >= g.h || c < 0 || c >= g.w) return 0.0;
  return x[static_cast<size_t>((n * g.h + r) * g.w + c)];
}

// y(N, OH, OW, F) = conv(x, w) + bias, relu
std::vector<double> reference_forward(const Window& g, int64_t f, const std::vector<float>& x,
                                      const std::vector<float>& w, const std::vector<float>& bias, bool relu) {
  std::vector<double> y(static_cast<size_t>(g.n * g.oh * g.ow * f));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow)
        for (int64_t o = 0; o < f; ++o) {
          double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t k = 0; k < g.kw; ++k)
              s += pixel(x, g, n, oh + i - g.pt, ow + k - g.pl) * w[static_cast<size_t>((i * g.kw + k) * f + o)];
          y[static_cast<size_t>(((n * g.oh + oh) * g.ow + ow) * f + o)] = relu ? std::max(s, 0.0) : s;
        }
  return y;
}

// dw(KH, KW, 1, F) = sum over pixels of x(window tap) * dy
std::vector<double> reference_grad_filter(const Window& g, int64_t f, const std::vector<float>& x,
                                          const std::vector<float>& dy) {
  std::vector<double> dw(static_cast<size_t>(g.kh * g.kw * f));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t k = 0; k < g.kw; ++k) {
            const double xv = pixel(x, g, n, oh + i - g.pt, ow + k - g.pl);
            for (int64_t o = 0; o < f; ++o)
              dw[static_cast<size_t>((i * g.kw + k) * f + o)] +=
                  xv * dy[static_cast<size_t>(((n * g.oh + oh) * g.ow + ow) * f + o)];
          }
  return dw;
}

// max |got - want| / max |want|
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

struct OpRun {
  std::vector<float> out;
  bool direct = false;  // whether conv_c1's kernel computed it
};

// One op over bound tensors (program inputs are written only by a BatchStager; variables are the test's own).
OpRun run_op(Op op, const std::vector<Tensor*>& inputs, const Attrs& at) {
  Graph g;
  std::vector<int> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.variable("in" + std::to_string(i), *inputs[i]));
  const int y = g.add(op, in, at);
  OpRun r;
  r.direct = cpu::c1_conv_taken(g, y);
  Program p(std::move(g), {y}, {}, Device::cpu());
  p.run(ExecContext{});
  r.out = values_of(p.output(y));
  return r;
}

// TK_CONV=im2col (the im2col kernels' own CTest run) and TK_CONV_C1=0 turn the direct kernels off.
bool turned_off() {
  const char* conv = std::getenv("TK_CONV");
  const char* c1 = std::getenv("TK_CONV_C1");
  return (conv && std::string(conv) == "im2col") || (c1 && std::string(c1) == "0");
}

const Geometry kGeometries[] = {
    {"tutorial conv1 (batch 9)", 9, 28, 28, 5, 5, 32, {2, 2, 2, 2}},
    {"4x3 kernel, asymmetric padding", 3, 7, 11, 4, 3, 16, {1, 2, 0, 1}},
    {"7x7 valid", 5, 13, 10, 7, 7, 16, {0, 0, 0, 0}},
    {"3x3 same, 48 filters", 6, 5, 3, 3, 3, 48, {1, 1, 1, 1}},
};

class ConvC1 : public ::testing::TestWithParam<DType> {};

TEST_P(ConvC1, MatchesThePlainSumsForwardAndFilterGradient) {
  if (turned_off()) GTEST_SKIP() << "turned off by TK_CONV / TK_CONV_C1";
  const DType t = GetParam();
  // float32: summation order only. bfloat16: the same float32 sums, rounded once to 8 significant bits.
  const double tolerance = t == DType::bf16 ? 1.0 / 256 : 2e-6;
  std::mt19937 gen(11);
  for (const Geometry& c : kGeometries) {
    SCOPED_TRACE(c.label);
    const Attrs at = attrs_of(c);
    const Shape xs{c.n, c.h, c.w, 1}, ws{c.kh, c.kw, 1, c.f};
    const Window g = Window::of(xs, at);
    const Shape ys{c.n, g.oh, g.ow, c.f};
    const auto x = random_values(xs.numel(), t, gen), w = random_values(ws.numel(), t, gen),
               bias = random_values(c.f, t, gen), dy = random_values(ys.numel(), t, gen);
    Tensor tx = tensor_of(xs, x, t), tw = tensor_of(ws, w, t), tb = tensor_of(Shape{c.f}, bias, t),
           tdy = tensor_of(ys, dy, t);

    const OpRun conv = run_op(Op::Conv2D, {&tx, &tw}, at);
    EXPECT_TRUE(conv.direct) << "the one-channel kernel was not taken";
    EXPECT_LE(relative_error(conv.out, reference_forward(g, c.f, x, w, {}, false)), tolerance);

    Attrs fused = at;
    fused.epilogue = Op::Relu;
    const OpRun conv_relu = run_op(Op::FusedConv2D, {&tx, &tw, &tb}, fused);
    EXPECT_TRUE(conv_relu.direct);
    EXPECT_LE(relative_error(conv_relu.out, reference_forward(g, c.f, x, w, bias, true)), tolerance);
    fused.epilogue = Op::kCount;  // bias alone
    const OpRun conv_bias = run_op(Op::FusedConv2D, {&tx, &tw, &tb}, fused);
    EXPECT_LE(relative_error(conv_bias.out, reference_forward(g, c.f, x, w, bias, false)), tolerance);

    Attrs grad = at;
    grad.shape = ws;
    const OpRun dw = run_op(Op::Conv2DGradFilter, {&tx, &tdy}, grad);
    EXPECT_TRUE(dw.direct);
    EXPECT_LE(relative_error(dw.out, reference_grad_filter(g, c.f, x, dy)), tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ConvC1, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The filter gradient adds fixed chunks of images in a fixed order: one thread and two give the same bits (a resumed
// run on another thread count computes what the first run did).
TEST(ConvC1Threads, FilterGradientBitsDoNotDependOnTheThreadCount) {
  if (cpu::max_threads() < 2) GTEST_SKIP() << "one thread only";
  if (turned_off()) GTEST_SKIP() << "turned off by TK_CONV / TK_CONV_C1";
  const Geometry c = kGeometries[0];
  const Attrs at = attrs_of(c);
  const Shape xs{c.n * 4, c.h, c.w, 1}, ws{c.kh, c.kw, 1, c.f};
  const Window g = Window::of(xs, at);
  std::mt19937 gen(3);
  Tensor tx = tensor_of(xs, random_values(xs.numel(), DType::f32, gen), DType::f32);
  Tensor tdy =
      tensor_of(Shape{xs[0], g.oh, g.ow, c.f}, random_values(xs[0] * g.oh * g.ow * c.f, DType::f32, gen), DType::f32);
  Attrs grad = at;
  grad.shape = ws;
  const int before = cpu::adapted_threads();
  ASSERT_TRUE(cpu::pin_threads(1));
  const OpRun one = run_op(Op::Conv2DGradFilter, {&tx, &tdy}, grad);
  ASSERT_TRUE(cpu::pin_threads(2));
  const OpRun two = run_op(Op::Conv2DGradFilter, {&tx, &tdy}, grad);
  cpu::pin_threads(before);
  ASSERT_TRUE(one.direct);
  for (size_t i = 0; i < one.out.size(); ++i) ASSERT_EQ(one.out[i], two.out[i]) << "at " << i;
}

// Convolutions outside its reach keep the kernel registered before it.
TEST(ConvC1Reach, OtherConvolutionsKeepTheirKernels) {
  if (turned_off()) GTEST_SKIP() << "turned off by TK_CONV / TK_CONV_C1";
  auto taken = [](const Shape& x, const Shape& w, Attrs at) {
    Graph g;
    const int y = g.add(Op::Conv2D, {g.placeholder_variable("x", x), g.placeholder_variable("w", w)}, at);
    return cpu::c1_conv_taken(g, y);
  };
  Attrs at = attrs_of(kGeometries[0]);
  EXPECT_TRUE(taken({2, 28, 28, 1}, {5, 5, 1, 32}, at));
  EXPECT_FALSE(taken({2, 28, 28, 3}, {5, 5, 3, 32}, at)) << "three input channels";
  EXPECT_FALSE(taken({2, 28, 28, 1}, {5, 5, 1, 7}, at)) << "7 filters: not a whole vector";
  Attrs wide4 = at;
  wide4.kernel[1] = 4;
  EXPECT_FALSE(taken({2, 28, 28, 1}, {5, 4, 1, 32}, wide4)) << "a 4 wide kernel";
  at.stride[0] = at.stride[1] = 2;
  EXPECT_FALSE(taken({2, 28, 28, 1}, {5, 5, 1, 32}, at)) << "stride 2";
}

}  // namespace
}  // namespace tk::graph
