// NaN and Inf in the op harness (tests/op_harness.h): ops given NaN, +Inf and -Inf inputs, on every registered backend
// with a device and in every float dtype, against TensorFlow's rule written out here element by element (not against
// the cpu kernel: a rule the cpu breaks fails on the cpu too). The rule, per family (docs/architecture.md, "NaN and
// Inf"):
// - a NaN input reaches every output computed from it: relu(NaN), relu6(NaN), clip(NaN), maximum(NaN, x) and the max
//   of a pooling window or a reduction holding a NaN are NaN, never 0 or the other operand;
// - Inf follows IEEE arithmetic (relu(-Inf) = 0, relu(+Inf) = +Inf, sigmoid(-Inf) = 0, Inf - Inf = NaN, so a softmax
//   row holding +Inf is NaN);
// - a loss over a batch holding a NaN prediction is NaN (the mean does not skip it);
// - gradient masks select: ReluGrad is dy where y > 0, else 0 (a NaN y selects 0); the Unary op's relu, relu6 and
//   clip gradients alike (tests/test_tensor_op_cases.cpp).
// The fused paths (FusedMatMul's relu epilogue on each GEMM engine, FusedConv2D's on im2col, oneDNN and the
// one-channel direct kernels) follow the same rule: tests/CMakeLists.txt runs this file under TK_GEMM=openblas,
// TK_GEMM=onednn and TK_CONV=im2col too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "graph/window.h"
#include "op_harness.h"

namespace tk::graph::harness {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Magnitudes in [0.25, 2], random sign; then input 0 (or those in `which`) gets NaN, +Inf and -Inf at fixed places.
void finite_init(float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) p[i] = sign(gen) ? mag(gen) : -mag(gen);
}
InitFn nonfinite_init(std::vector<int> which = {0}, bool infinities = true) {
  return [which, infinities](int i, float* p, int64_t n, std::mt19937& gen) {
    finite_init(p, n, gen);
    if (std::find(which.begin(), which.end(), i) == which.end()) return;
    p[(1 + i) % n] = kNaN;  // each input's at other places: a NaN meets a finite value
    if (infinities && n >= 6) p[(n / 2 + i) % n] = kInf, p[(n - 2 + i) % n] = -kInf;
  };
}

double relu_rule(double x) { return std::isnan(x) ? x : x > 0 ? x : 0.0; }
double max_rule(double m, double v) { return std::isnan(m) || std::isnan(v) ? NAN : std::max(m, v); }

Tensor like(const Shape& s) { return Tensor::zeros(s); }

// y = f(x) element by element.
RuleFn elementwise(std::function<double(double)> f) {
  return [f](const std::vector<Tensor>& in) {
    Tensor y = like(in[0].shape());
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(f(in[0].data<float>()[i]));
    return std::vector<Tensor>{y};
  };
}
RuleFn elementwise2(std::function<double(double, double)> f) {
  return [f](const std::vector<Tensor>& in) {
    Tensor y = like(in[0].shape());
    for (int64_t i = 0; i < y.numel(); ++i)
      y.data<float>()[i] = static_cast<float>(f(in[0].data<float>()[i], in[1].data<float>()[i]));
    return std::vector<Tensor>{y};
  };
}

// a(m,k) b(k,n) [+ bias(n)] [relu], in double.
RuleFn matmul_rule(bool bias, bool relu) {
  return [=](const std::vector<Tensor>& in) {
    const int64_t m = in[0].shape()[0], k = in[0].shape()[1], n = in[1].shape()[1];
    Tensor y = like(Shape{m, n});
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias ? in[2].data<float>()[j] : 0.0;
        for (int64_t q = 0; q < k; ++q) s += double(in[0].data<float>()[r * k + q]) * in[1].data<float>()[q * n + j];
        y.data<float>()[r * n + j] = static_cast<float>(relu ? relu_rule(s) : s);
      }
    return std::vector<Tensor>{y};
  };
}

// conv(x(N,H,W,C), w(KH,KW,C,F)) + bias [relu], directly, in double.
RuleFn conv_rule(Attrs at, bool relu) {
  return [=](const std::vector<Tensor>& in) {
    const Window g = Window::of(in[0].shape(), at);
    const int64_t f = in[1].shape()[3], cg = g.c / at.groups, fg = f / at.groups;  // per group (attrs.groups)
    Tensor y = like(Shape{g.n, g.oh, g.ow, f});
    const float *x = in[0].data<float>(), *w = in[1].data<float>(), *b = in[2].data<float>();
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow)
          for (int64_t o = 0; o < f; ++o) {
            double s = b[o];
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.sh - g.pt + i * g.dh, iw = ow * g.sw - g.pl + j * g.dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                for (int64_t c = 0; c < cg; ++c)
                  s += double(x[((n * g.h + ih) * g.w + iw) * g.c + o / fg * cg + c]) *
                       w[((i * g.kw + j) * cg + c) * f + o];
              }
            y.data<float>()[((n * g.oh + oh) * g.ow + ow) * f + o] = static_cast<float>(relu ? relu_rule(s) : s);
          }
    return std::vector<Tensor>{y};
  };
}

// Max (or average) over each window clipped to the image; padding never counts.
RuleFn pool_rule(Attrs at, bool max) {
  return [=](const std::vector<Tensor>& in) {
    const Window g = Window::of(in[0].shape(), at);
    Tensor y = like(Shape{g.n, g.oh, g.ow, g.c});
    const float* x = in[0].data<float>();
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow)
          for (int64_t c = 0; c < g.c; ++c) {
            double acc = max ? -INFINITY : 0.0;
            int64_t count = 0;
            for (int64_t ih = std::max<int64_t>(oh * g.sh - g.pt, 0); ih < std::min(oh * g.sh - g.pt + g.kh, g.h); ++ih)
              for (int64_t iw = std::max<int64_t>(ow * g.sw - g.pl, 0); iw < std::min(ow * g.sw - g.pl + g.kw, g.w);
                   ++iw, ++count) {
                const double v = x[((n * g.h + ih) * g.w + iw) * g.c + c];
                acc = max ? max_rule(acc, v) : acc + v;
              }
            y.data<float>()[((n * g.oh + oh) * g.ow + ow) * g.c + c] =
                static_cast<float>(max ? acc : acc / double(count));
          }
    return std::vector<Tensor>{y};
  };
}

// Softmax over the last axis: exp(x - max) / sum, the max NaN-propagating (TensorFlow's formula).
std::vector<Tensor> softmax_rule(const std::vector<Tensor>& in) {
  const int64_t n = in[0].shape()[-1], rows = in[0].numel() / n;
  Tensor y = like(in[0].shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0].data<float>() + r * n;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = max_rule(m, x[j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
    for (int64_t j = 0; j < n; ++j) y.data<float>()[r * n + j] = static_cast<float>(std::exp(x[j] - m) / s);
  }
  return {y};
}

// tf.nn.log_softmax: (x - max) - log(sum(exp(x - max))); a NaN, or a max of +-inf, makes the row NaN.
std::vector<Tensor> log_softmax_rule(const std::vector<Tensor>& in) {
  const int64_t n = in[0].shape()[-1], rows = in[0].numel() / n;
  Tensor y = like(in[0].shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0].data<float>() + r * n;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) m = max_rule(m, x[j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
    for (int64_t j = 0; j < n; ++j) y.data<float>()[r * n + j] = static_cast<float>((x[j] - m) - std::log(s));
  }
  return {y};
}

// A loss whose batch holds a NaN prediction: NaN.
std::vector<Tensor> nan_scalar(const std::vector<Tensor>&) { return {Tensor::from_vector<float>(Shape{}, {kNaN})}; }

Attrs window(int64_t kh, int64_t kw, int64_t sh, int64_t sw, std::array<int64_t, 4> pad) {
  Attrs at;
  at.kernel[0] = kh, at.kernel[1] = kw, at.stride[0] = sh, at.stride[1] = sw;
  for (int i = 0; i < 4; ++i) at.pad[i] = pad[static_cast<size_t>(i)];
  return at;
}

}  // namespace

// Keras' (TensorFlow's) bilinear resize with half-pixel centers, in double, in TensorFlow's order of operations:
// top = tl + (tr - tl) * fw, bottom likewise, y = top + (bottom - top) * fh. So an Inf pixel makes NaN wherever it is
// one of the four taps (Inf - Inf, or Inf * 0 where its weight is 0): TensorFlow's behaviour, kept.
RuleFn resize_rule(Shape out) {
  return [out](const std::vector<Tensor>& in) {
    const Shape& x = in[0].shape();
    Tensor y = like(out);
    auto tap = [](int64_t j, int64_t n_in, int64_t n_out, int64_t& lo, int64_t& hi, double& frac) {
      const double f = (static_cast<double>(j) + 0.5) * static_cast<double>(n_in) / static_cast<double>(n_out) - 0.5;
      lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(f)), 0, n_in - 1);
      hi = std::clamp<int64_t>(static_cast<int64_t>(std::floor(f)) + 1, 0, n_in - 1);
      frac = f - std::floor(f);
    };
    const float* v = in[0].data<float>();
    for (int64_t n = 0; n < out[0]; ++n)
      for (int64_t oh = 0; oh < out[1]; ++oh)
        for (int64_t ow = 0; ow < out[2]; ++ow)
          for (int64_t c = 0; c < out[3]; ++c) {
            int64_t h0, h1, w0, w1;
            double fh, fw;
            tap(oh, x[1], out[1], h0, h1, fh);
            tap(ow, x[2], out[2], w0, w1, fw);
            auto at = [&](int64_t h, int64_t w) { return double(v[((n * x[1] + h) * x[2] + w) * x[3] + c]); };
            const double top = at(h0, w0) + (at(h0, w1) - at(h0, w0)) * fw;
            const double bottom = at(h1, w0) + (at(h1, w1) - at(h1, w0)) * fw;
            y.data<float>()[((n * out[1] + oh) * out[2] + ow) * out[3] + c] =
                static_cast<float>(top + (bottom - top) * fh);
          }
    return std::vector<Tensor>{y};
  };
}

// Keras' affine transform (its jax backend's map_coordinates, order 1, fill_mode nearest), in double: the sum over
// the 2 x 2 taps of weight * pixel, so a NaN or Inf pixel reaches every output that reads it (Inf * 0 = NaN where its
// weight is 0).
RuleFn affine_rule() {
  return [](const std::vector<Tensor>& in) {
    const Shape& x = in[0].shape();
    Tensor y = like(x);
    const float* v = in[0].data<float>();
    for (int64_t n = 0; n < x[0]; ++n) {
      const float* t = in[1].data<float>() + 8 * n;
      for (int64_t oy = 0; oy < x[1]; ++oy)
        for (int64_t ox = 0; ox < x[2]; ++ox)
          for (int64_t c = 0; c < x[3]; ++c) {
            const double row = double(t[3]) * ox + double(t[4]) * oy + t[5];
            const double col = double(t[0]) * ox + double(t[1]) * oy + t[2];
            const double fr = std::floor(row), fc = std::floor(col);
            double sum = 0.0;
            for (int i = 0; i < 2; ++i)
              for (int j = 0; j < 2; ++j) {
                const double w = (i ? row - fr : 1.0 - (row - fr)) * (j ? col - fc : 1.0 - (col - fc));
                const int64_t h = std::clamp<int64_t>(static_cast<int64_t>(fr) + i, 0, x[1] - 1);
                const int64_t ww = std::clamp<int64_t>(static_cast<int64_t>(fc) + j, 0, x[2] - 1);
                sum += w * double(v[((n * x[1] + h) * x[2] + ww) * x[3] + c]);
              }
            y.data<float>()[((n * x[1] + oy) * x[2] + ox) * x[3] + c] = static_cast<float>(sum);
          }
    }
    return std::vector<Tensor>{y};
  };
}

std::vector<NonFiniteCase> nonfinite_cases() {
  std::vector<NonFiniteCase> c;
  auto add = [&](Case cs, RuleFn rule, int64_t spread_block = 0) {
    c.push_back({std::move(cs), std::move(rule), spread_block});
  };
  // Activations. 70001 elements: the parallel, vectorized loops (and their tails) see the NaN too.
  add({"Relu", Op::Relu, {{4, 5}}, {}, {}, nonfinite_init()}, elementwise(relu_rule));
  add({"Relu big", Op::Relu, {{70001}}, {}, {}, nonfinite_init()}, elementwise(relu_rule));
  add({"Sigmoid", Op::Sigmoid, {{4, 5}}, {}, {}, nonfinite_init()},
      elementwise([](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
  add({"Tanh", Op::Tanh, {{4, 5}}, {}, {}, nonfinite_init()}, elementwise([](double x) { return std::tanh(x); }));
  add({"Gelu", Op::Gelu, {{4, 5}}, {}, {}, nonfinite_init()},
      elementwise([](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }));
  {
    Attrs at;
    at.alpha = 1.0f;
    add({"Elu", Op::Elu, {{4, 5}}, {}, at, nonfinite_init()},
        elementwise([](double x) { return x > 0 ? x : std::expm1(x); }));
    at.alpha = 0.2f;
    add({"LeakyRelu", Op::LeakyRelu, {{4, 5}}, {}, at, nonfinite_init()},
        elementwise([](double x) { return x >= 0 ? x : 0.2 * x; }));
  }
  // The mask selects: a NaN or non-positive y gives 0; a NaN dy where y > 0 gives NaN.
  add({"ReluGrad",
       Op::ReluGrad,
       {{4, 5}, {4, 5}},
       {},
       {},
       [](int i, float* p, int64_t n, std::mt19937& g) {
         finite_init(p, n, g);
         if (i == 0) p[1] = kNaN, p[3] = kInf, p[4] = kNaN;  // dy: where y > 0 (1, 3) and where y is 0 (4)
         if (i == 1) {                                       // y, a relu's output: >= 0, one NaN
           for (int64_t k = 0; k < n; ++k) p[k] = std::abs(p[k]);
           p[4] = 0.0f, p[7] = 0.0f, p[9] = kNaN;
         }
       }},
      elementwise2([](double dy, double y) { return y > 0 ? dy : 0.0; }));
  add({"Softmax", Op::Softmax, {{4, 6}}, {}, {}, nonfinite_init()}, softmax_rule);
  add({"Softmax wide", Op::Softmax, {{3, 40}}, {}, {}, nonfinite_init()}, softmax_rule);  // the vector max_row
  add({"LogSoftmax", Op::LogSoftmax, {{4, 6}}, {}, {}, nonfinite_init()}, log_softmax_rule);
  add({"LogSoftmax wide", Op::LogSoftmax, {{3, 40}}, {}, {}, nonfinite_init()}, log_softmax_rule);
  // Elementwise arithmetic.
  add({"Add", Op::Add, {{3, 4}, {3, 4}}, {}, {}, nonfinite_init({0, 1})},
      elementwise2([](double a, double b) { return a + b; }));
  add({"Mul", Op::Mul, {{3, 4}, {3, 4}}, {}, {}, nonfinite_init({0, 1})},
      elementwise2([](double a, double b) { return a * b; }));
  {
    Attrs at;
    at.scale = 0.5f, at.offset = -1.0f;
    add({"Scale", Op::Scale, {{3, 4}}, {}, at, nonfinite_init()}, elementwise([](double x) { return x * 0.5 - 1.0; }));
  }
  // Products and their relu epilogues (graph/fuse.h), NaN and Inf in a: whole rows of the product.
  add({"MatMul", Op::MatMul, {{6, 4}, {4, 5}}, {}, {}, nonfinite_init({0})}, matmul_rule(false, false));
  for (bool relu : {false, true}) {
    Attrs at;
    at.epilogue = relu ? Op::Relu : Op::kCount;
    add({std::string("FusedMatMul bias") + (relu ? " relu" : ""),
         Op::FusedMatMul,
         {{6, 4}, {4, 5}, {5}},
         {},
         at,
         nonfinite_init({0})},
        matmul_rule(true, relu));
    // Large enough that TK_GEMM=auto measures both engines (> 2e6 flops) and the epilogue's vector loop runs.
    add({std::string("FusedMatMul big bias") + (relu ? " relu" : ""),
         Op::FusedMatMul,
         {{64, 128}, {128, 160}, {160}},
         {},
         at,
         nonfinite_init({0})},
        matmul_rule(true, relu));
  }
  // Convolutions with the relu epilogue: a NaN pixel makes every output whose window holds it NaN.
  for (bool relu : {false, true}) {
    Attrs at = window(3, 2, 1, 1, {0, 0, 0, 0});
    at.epilogue = relu ? Op::Relu : Op::kCount;
    add({std::string("FusedConv2D bias") + (relu ? " relu" : ""),
         Op::FusedConv2D,
         {{2, 5, 4, 3}, {3, 2, 3, 4}, {4}},
         {},
         at,
         nonfinite_init({0})},
        conv_rule(at, relu), 3 * 3 * 4);
    Attrs c1 = window(5, 5, 1, 1, {2, 2, 2, 2});  // one input channel: backends/cpu/conv_c1.cpp
    c1.epilogue = at.epilogue;
    add({std::string("FusedConv2D one channel bias") + (relu ? " relu" : ""),
         Op::FusedConv2D,
         {{2, 6, 7, 1}, {5, 5, 1, 16}, {16}},
         {},
         c1,
         nonfinite_init({0})},
        conv_rule(c1, relu), 6 * 7 * 16);
    // Depthwise (groups = C, depth_multiplier 2; DepthwiseConv2D): a NaN pixel reaches only its own channel's outputs.
    Attrs dw = window(3, 2, 2, 1, {1, 1, 0, 1});
    dw.groups = 3, dw.epilogue = at.epilogue;
    add({std::string("FusedConv2D depthwise bias") + (relu ? " relu" : ""),
         Op::FusedConv2D,
         {{2, 5, 4, 3}, {3, 2, 1, 6}, {6}},
         {},
         dw,
         nonfinite_init({0})},
        conv_rule(dw, relu), 3 * 4 * 6);
  }
  // Pooling: a NaN in a window gives NaN, +Inf gives +Inf; an average holding +Inf and -Inf is NaN.
  for (auto [label, at] : {std::pair{"2x2", window(2, 2, 2, 2, {0, 0, 0, 0})},
                           std::pair{"3x3 s2 same", window(3, 3, 2, 2, {1, 1, 1, 1})}}) {
    add({std::string("MaxPool2D ") + label, Op::MaxPool2D, {{2, 4, 5, 3}}, {}, at, nonfinite_init()},
        pool_rule(at, true));
    add({std::string("AvgPool2D ") + label, Op::AvgPool2D, {{2, 4, 5, 3}}, {}, at, nonfinite_init()},
        pool_rule(at, false));
  }
  {
    Attrs big = window(2, 2, 2, 2, {0, 0, 0, 0});  // 256 channels: the 16-bit kernels' channel blocks
    add({"MaxPool2D 2x2 wide", Op::MaxPool2D, {{1, 4, 4, 300}}, {}, big, nonfinite_init()}, pool_rule(big, true));
  }
  // Losses: one NaN prediction makes the batch's loss NaN (labels and targets finite).
  auto pred_nan = [](int labels, int64_t classes) {
    return [=](int i, float* p, int64_t n, std::mt19937& g) {
      if (i == labels) {
        for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>((k * 3 + 1) % classes);
        return;
      }
      std::uniform_real_distribution<float> u(0.1f, 0.9f);
      for (int64_t k = 0; k < n; ++k) p[k] = u(g);
      if (i == 0) p[n / 2] = kNaN;
    };
  };
  add({"MseLoss", Op::MseLoss, {{4, 3}, {4, 3}}, {}, {}, pred_nan(-1, 1)}, nan_scalar);
  for (bool logits : {true, false}) {
    Attrs at;
    at.from_logits = logits;
    const std::string sfx = logits ? " logits" : " probs";
    add({"BceLoss" + sfx, Op::BceLoss, {{4, 3}, {4, 3}}, {}, at, pred_nan(-1, 1)}, nan_scalar);
    add({"CceLoss" + sfx, Op::CceLoss, {{4, 5}, {4, 5}}, {}, at, pred_nan(-1, 1)}, nan_scalar);
    add({"SparseCceLoss" + sfx, Op::SparseCceLoss, {{4, 5}, {4}}, {}, at, pred_nan(1, 5), {std::nullopt, DType::i32}},
        nan_scalar);
  }
  {  // +Inf logits: exp(Inf - Inf) is NaN, as in TensorFlow's softmax cross-entropy
    Attrs at;
    at.from_logits = true;
    add({"SparseCceLoss logits inf",
         Op::SparseCceLoss,
         {{4, 5}, {4}},
         {},
         at,
         [](int i, float* p, int64_t n, std::mt19937& g) {
           if (i == 1) {
             for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(k % 5);
             return;
           }
           finite_init(p, n, g);
           p[7] = kInf;
         },
         {std::nullopt, DType::i32}},
        nan_scalar);
  }
  {  // Keras' image resize and affine transform: a NaN or Inf pixel reaches the outputs that read it
    Attrs at;
    at.bilinear = true;
    at.shape = Shape{2, 7, 5, 3};
    add({"Resize bilinear", Op::Resize, {{2, 4, 6, 3}}, {}, at, nonfinite_init()}, resize_rule(at.shape));
    Attrs af;
    af.bilinear = true;
    af.fill_mode = 1;  // nearest: every tap is a pixel
    add({"AffineTransform bilinear",
         Op::AffineTransform,
         {{2, 5, 6, 2}, {2, 8}},
         {},
         af,
         [](int i, float* p, int64_t n, std::mt19937& g) {
           if (i == 1) {  // a rotation with a shift, and a zoom
             const float t[16] = {0.9f, -0.3f, 1.2f, 0.3f, 0.9f, -0.7f, 0, 0, 1.3f, 0, -0.8f, 0, 1.3f, -0.55f, 0, 0};
             for (int64_t k = 0; k < n; ++k) p[k] = t[k % 16];
             return;
           }
           nonfinite_init()(i, p, n, g);
         }},
        affine_rule());
  }
  for (NonFiniteCase& t : tensor_nonfinite_cases()) c.push_back(std::move(t));
  for (NonFiniteCase& t : lstm_nonfinite_cases()) c.push_back(std::move(t));
  for (NonFiniteCase& t : attention_nonfinite_cases()) c.push_back(std::move(t));
  return c;
}

void check_nonfinite(const NonFiniteCase& nc, Target target, std::string* skipped) {
  const Case& c = nc.c;
  const std::vector<Tensor> in = convert_inputs(c, generate_inputs(c, 3), target.dtype);
  Instance inst(c, target, in);
  if (auto why = skip_reason(inst)) {
    *skipped = *why;
    return;
  }
  // The rule from the inputs the target reads (rounded to its dtype), in float32.
  const std::vector<Tensor> want = nc.rule(convert_inputs(c, in, DType::f32));
  const std::vector<Tensor> got = inst.run_forward();
  ASSERT_EQ(got.size(), want.size()) << c.label;
  bool any_nan = false;
  for (const Tensor& w : want)
    for (int64_t i = 0; i < w.numel(); ++i) any_nan |= std::isnan(w.data<float>()[i]);
  EXPECT_TRUE(any_nan) << c.label << ": the rule expects no NaN: the case proves nothing about NaN";
  for (size_t k = 0; k < got.size(); ++k) {
    Tensor w = want[k].clone();
    if (nc.spread_block > 0) {  // accept the spread a tiled kernel may add (NonFiniteCase::spread_block)
      const Tensor gf = host_f32(got[k]);
      const float* g = gf.data<float>();
      float* v = w.data<float>();
      for (int64_t b0 = 0; b0 < w.numel(); b0 += nc.spread_block) {
        const int64_t b1 = std::min(w.numel(), b0 + nc.spread_block);
        bool nonfinite = false;
        for (int64_t i = b0; i < b1; ++i) nonfinite |= !std::isfinite(v[i]);
        if (!nonfinite) continue;
        for (int64_t i = b0; i < b1; ++i)
          if (!std::isnan(v[i]) && !std::isfinite(g[i])) v[i] = g[i];
      }
    }
    expect_close(got[k], w, tolerance(target.dtype).forward,
                 c.label + " on " + target.name() + ": output " + std::to_string(k) + " against the NaN/Inf rule");
  }
}

namespace {

class OpNonFinite : public ::testing::TestWithParam<std::tuple<NonFiniteCase, Target>> {};

TEST_P(OpNonFinite, FollowsTheRule) {
  std::string skipped;
  check_nonfinite(std::get<0>(GetParam()), std::get<1>(GetParam()), &skipped);
  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpNonFinite,
                         ::testing::Combine(::testing::ValuesIn(nonfinite_cases()), ::testing::ValuesIn(targets())),
                         [](const auto& info) {
                           return param_name(std::get<0>(info.param).c.label + "_" + std::get<1>(info.param).name());
                         });

TEST(OpNonFiniteCoverage, CaseLabelsAreUniqueAndTheNamedOpsAreCovered) {
  std::set<std::string> seen;
  std::set<Op> ops;
  for (const NonFiniteCase& c : nonfinite_cases()) {
    EXPECT_TRUE(seen.insert(param_name(c.c.label)).second) << c.c.label;
    ops.insert(c.c.op);
  }
  // The ops whose NaN rule issue 35 names, and the fused paths that compute them.
  for (Op op : {Op::Relu, Op::ReluGrad, Op::FusedMatMul, Op::FusedConv2D, Op::MaxPool2D, Op::Softmax, Op::MseLoss,
                Op::BceLoss, Op::CceLoss, Op::SparseCceLoss, Op::Unary, Op::Binary, Op::Reduce})
    EXPECT_TRUE(ops.count(op)) << op_name(op) << " has no NaN/Inf case";
}

}  // namespace

void PrintTo(const NonFiniteCase& c, std::ostream* os) { *os << c.c.label; }

}  // namespace tk::graph::harness
