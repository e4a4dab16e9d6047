// LayerNormalization's fused CPU kernels (backends/cpu/layer_norm.cpp, layer_norm_rows.h) and the gradient graph the
// layer's ops get: every ISA's lanes against one lane at a time, LayerNormGrad's one sweep against the separate
// LayerNormInputGrad and LayerNormGammaGrad, the rule's choice of ops, and autodiff seeded with an output gradient
// (graph/autodiff.h) against the loss sum(y * dy) it replaces. The values against Keras: test_layer_normalization.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/layer_norm_rows.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng) * scale + shift;
  return v;
}

Tensor tensor(Shape s, const std::vector<float>& v) {
  Tensor t(std::move(s), DType::f32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// max over i of |a - b| / max(1, |b|)
double worst(const float* a, const float* b, int64_t n) {
  double w = 0;
  for (int64_t i = 0; i < n; ++i)
    w = std::max(w, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return w;
}

// Each ISA this CPU has against the scalar lane; shapes with vector tails (n = 7, 45) and with no tail (n = 64).
TEST(LayerNormRows, EveryIsaAgreesWithOneLaneAtATime) {
  for (int64_t n : {7, 45, 64}) {
    const int64_t rows = 37;
    const std::vector<float> x = normal(rows * n, 1, 3.0f, 5.0f), dy = normal(rows * n, 2), gamma = normal(n, 3),
                             beta = normal(n, 4);
    auto run = [&](cpu::VecIsa isa, std::vector<float>& stats, std::vector<float>& y, std::vector<float>& dx,
                   std::vector<float>& dx2, std::vector<double>& acc) {
      stats.assign(static_cast<size_t>(2 * rows), 0.0f);
      y.assign(x.size(), 0.0f);
      dx.assign(x.size(), 0.0f);
      dx2.assign(x.size(), 0.0f);
      acc.assign(static_cast<size_t>(2 * n), 0.0);
      std::vector<float> chunk(static_cast<size_t>(2 * n));
      cpu::layer_norm_stats_rows(x.data(), stats.data(), rows, n, 1e-3f, isa);
      cpu::layer_norm_apply_rows(x.data(), stats.data(), gamma.data(), beta.data(), y.data(), rows, n, isa);
      cpu::layer_norm_input_grad_rows(dy.data(), x.data(), stats.data(), gamma.data(), dx.data(), rows, n, isa);
      cpu::layer_norm_grad_rows(dy.data(), x.data(), stats.data(), gamma.data(), dx2.data(), rows, n, acc.data(),
                                chunk.data(), isa);
    };
    std::vector<float> s0, y0, dx0, dxb0;
    std::vector<double> acc0;
    run(cpu::VecIsa::scalar, s0, y0, dx0, dxb0, acc0);
    // The scalar lane against a plain double reference.
    for (int64_t i = 0; i < rows; ++i) {
      double m = 0, v = 0;
      for (int64_t j = 0; j < n; ++j) m += x[static_cast<size_t>(i * n + j)];
      m /= double(n);
      for (int64_t j = 0; j < n; ++j) v += std::pow(x[static_cast<size_t>(i * n + j)] - m, 2);
      EXPECT_NEAR(s0[static_cast<size_t>(2 * i)], m, 1e-6 * std::abs(m));
      EXPECT_NEAR(s0[static_cast<size_t>(2 * i + 1)], 1.0 / std::sqrt(v / double(n) + 1e-3), 1e-6);
    }
    for (int64_t j = 0; j < n; ++j) {
      double g = 0, b = 0;
      for (int64_t i = 0; i < rows; ++i) {
        const size_t k = static_cast<size_t>(i * n + j);
        g += double(dy[k]) * ((x[k] - s0[static_cast<size_t>(2 * i)]) * s0[static_cast<size_t>(2 * i + 1)]);
        b += dy[k];
      }
      EXPECT_NEAR(acc0[static_cast<size_t>(j)], g, 1e-5 * std::max(1.0, std::abs(g))) << "n " << n << " col " << j;
      EXPECT_NEAR(acc0[static_cast<size_t>(n + j)], b, 1e-5 * std::max(1.0, std::abs(b))) << "n " << n << " col " << j;
    }
    EXPECT_LE(worst(dxb0.data(), dx0.data(), rows * n), 1e-6) << "one sweep's dx against the input gradient's, n " << n;
    for (cpu::VecIsa isa : {cpu::VecIsa::avx2, cpu::VecIsa::avx512}) {
      if (!cpu::vec_isa_supported(isa)) continue;
      std::vector<float> s, y, dx, dxb;
      std::vector<double> acc;
      run(isa, s, y, dx, dxb, acc);
      const std::string what = "isa " + std::to_string(static_cast<int>(isa)) + ", n " + std::to_string(n);
      EXPECT_LE(worst(s.data(), s0.data(), 2 * rows), 1e-7) << what;
      EXPECT_LE(worst(y.data(), y0.data(), rows * n), 1e-6) << what;
      EXPECT_LE(worst(dx.data(), dx0.data(), rows * n), 1e-6) << what;
      EXPECT_LE(worst(dxb.data(), dx0.data(), rows * n), 1e-6) << what;
      for (int64_t j = 0; j < 2 * n; ++j)
        EXPECT_NEAR(acc[static_cast<size_t>(j)], acc0[static_cast<size_t>(j)],
                    1e-5 * std::max(1.0, std::abs(acc0[static_cast<size_t>(j)])))
            << what;
    }
  }
}

// LayerNormGrad (dx and both parameter sums in one sweep) against LayerNormInputGrad and LayerNormGammaGrad, over
// enough rows for its 32 blocks (and a short last one) and as one row.
TEST(LayerNormGrad, OneSweepMatchesTheSeparateOps) {
  for (const Shape& xs : {Shape{1, 5}, Shape{1000, 24}, Shape{3, 11, 33}}) {
    const int64_t n = xs[-1], rows = xs.numel() / n;
    graph::Graph g;
    graph::Attrs at;
    at.epsilon = 1e-3f;
    Tensor xv = tensor(xs, normal(xs.numel(), 5, 2.0f, -1.0f)), dyv = tensor(xs, normal(xs.numel(), 6)),
           gv = tensor(Shape{n}, normal(n, 7));
    const int x = g.variable("x", xv), dy = g.variable("dy", dyv), gamma = g.variable("gamma", gv);
    const int stats = g.add(graph::Op::LayerNormStats, {x}, at, "stats");
    const int all = g.add(graph::Op::LayerNormGrad, {dy, x, stats, gamma}, at, "all");
    const int dx = g.add(graph::Op::LayerNormInputGrad, {dy, x, stats, gamma}, at, "dx");
    const int sums = g.add(graph::Op::LayerNormGammaGrad, {dy, x, stats}, at, "sums");
    ASSERT_EQ(g[all].shape, (Shape{rows + 2, n}));
    graph::Program p(std::move(g), {all, dx, sums}, {}, Device::cpu());
    p.run(graph::ExecContext{});
    const Tensor a = p.output(all), d = p.output(dx), s = p.output(sums);
    EXPECT_LE(worst(a.data<float>(), d.data<float>(), xs.numel()), 1e-6) << xs.to_string();
    // The parameter sums add 1000 rows in another order (32 fixed blocks against one pass): within 1e-5, as the sums
    // above (2.9e-6 measured in the ASan build, whose code rounds differently from Release's).
    EXPECT_LE(worst(a.data<float>() + xs.numel(), s.data<float>(), 2 * n), 1e-5) << xs.to_string();
  }
}

// The layer's gradient: one LayerNormGrad when dx and the parameters' gradients are all needed (read through Views),
// LayerNormInputGrad alone for dx alone.
TEST(LayerNormGrad, TheRuleSweepsOnceWhenDxAndTheParametersAreNeeded) {
  auto grad_ops = [](bool params) {
    LayerPtr layer = layers::LayerNormalization({});
    (*layer)(tk::Input(Shape{16}));
    graph::Graph g;
    nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
    const int x = g.placeholder_variable("x", Shape{4, 16});
    const int y = layer->call(ctx, {x});
    std::vector<int> wrt{x};
    if (params) wrt.push_back(ctx.variable(layer->weights()[0]));
    const int n = g.size();
    graph::gradients(g, {y}, wrt, nullptr, g.placeholder_variable("dy", Shape{4, 16}));
    std::multiset<graph::Op> ops;
    for (int i = n; i < g.size(); ++i) ops.insert(g[i].op);
    return ops;
  };
  const auto both = grad_ops(true), dx_only = grad_ops(false);
  EXPECT_EQ(both.count(graph::Op::LayerNormGrad), 1u);
  EXPECT_EQ(both.count(graph::Op::LayerNormInputGrad) + both.count(graph::Op::LayerNormGammaGrad), 0u);
  EXPECT_GE(both.count(graph::Op::View), 2u);
  EXPECT_EQ(dx_only.count(graph::Op::LayerNormGrad), 0u);
  EXPECT_EQ(dx_only.count(graph::Op::LayerNormInputGrad), 1u);
}

// gradients() seeded with dy as y's output gradient gives sum(y * dy)'s gradients (what bench/tensor_ops.cpp times);
// a seed of another shape is refused, naming both shapes.
TEST(OutputGradient, SeedingTheOutputMatchesTheLossSumOfYTimesDy) {
  const Shape xs{9, 20};
  const Tensor xv = tensor(xs, normal(xs.numel(), 8)), dyv = tensor(xs, normal(xs.numel(), 9));
  auto run = [&](bool seeded) {
    LayerPtr layer = layers::LayerNormalization({});
    (*layer)(tk::Input(Shape{20}));
    graph::Graph g;
    nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
    Tensor xc = xv.clone(), dc = dyv.clone();
    const int x = g.variable("x", xc), dy = g.variable("dy", dc);
    const int y = layer->call(ctx, {x});
    std::vector<int> wrt{x, ctx.variable(layer->weights()[0]), ctx.variable(layer->weights()[1])};
    std::vector<int> grads;
    if (seeded) {
      grads = graph::gradients(g, {y}, wrt, nullptr, dy);
    } else {
      graph::OpBuilder b{g, nullptr, "loss"};
      const int loss = graph::ops::reduce(b, graph::ReduceFn::sum,
                                          graph::ops::binary(b, graph::BinaryFn::multiply, y, dy), {0, 1}, false);
      grads = graph::gradients(g, {loss}, wrt);
    }
    graph::Program p(std::move(g), grads, {}, Device::cpu());
    p.run(graph::ExecContext{});
    std::vector<Tensor> out;
    for (int gr : grads) out.push_back(p.output(gr).clone());
    return out;
  };
  const auto a = run(true), b = run(false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape());
    EXPECT_LE(worst(a[i].data<float>(), b[i].data<float>(), a[i].numel()), 1e-6) << "gradient " << i;
  }
  graph::Graph g;
  const int y = g.placeholder_variable("y", Shape{3, 4}), dy = g.placeholder_variable("dy", Shape{4, 3});
  const int w = g.placeholder_variable("w", Shape{3, 4});
  const int z = g.add(graph::Op::Mul, {y, w}, {}, "z");
  try {
    graph::gradients(g, {z}, {w}, nullptr, dy);
    ADD_FAILURE() << "a seed of another shape was taken";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("(4, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
  }
  EXPECT_THROW(graph::gradients(g, {z}, {w}), InvalidArgument);  // a non-scalar output without a seed
}

}  // namespace
}  // namespace tk
