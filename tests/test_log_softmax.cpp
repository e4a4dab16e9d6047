// The fused LogSoftmax op (graph/op.h) and its CPU lanes (backends/cpu/vector_exp.h's log_softmax_rows): every ISA
// against one lane at a time and against the composite x - logsumexp(x) it replaces, and ops::log_softmax taking the
// op for the last axis only. Finite differences, 16-bit and NaN/Inf: the op harness (tests/test_tensor_op_cases.cpp,
// tests/test_ops_nonfinite.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/vector_exp.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"

namespace tk {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

TEST(LogSoftmaxRows, EveryIsaAgreesWithADoubleReference) {
  for (int64_t n : {1, 7, 16, 45, 1024}) {
    const int64_t rows = 5;
    const std::vector<float> x = normal(rows * n, 11, 4.0f);
    std::vector<double> want(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, double(x[static_cast<size_t>(r * n + j)]));
      for (int64_t j = 0; j < n; ++j) s += std::exp(x[static_cast<size_t>(r * n + j)] - m);
      for (int64_t j = 0; j < n; ++j)
        want[static_cast<size_t>(r * n + j)] = (x[static_cast<size_t>(r * n + j)] - m) - std::log(s);
    }
    for (cpu::VecIsa isa : {cpu::VecIsa::scalar, cpu::VecIsa::avx2, cpu::VecIsa::avx512}) {
      if (!cpu::vec_isa_supported(isa)) continue;
      std::vector<float> y(x.size());
      cpu::log_softmax_rows(x.data(), y.data(), rows, n, isa);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 2e-6 * std::max(1.0, std::abs(want[i])))
            << "isa " << static_cast<int>(isa) << ", n " << n << ", element " << i;
    }
  }
}

// The op for the last axis, the composite (a logsumexp Reduce and a subtract) for any other; both agree.
TEST(LogSoftmax, TheLastAxisIsOneOpAndAgreesWithTheComposite) {
  Tensor x(Shape{6, 33}, DType::f32);
  const std::vector<float> v = normal(x.numel(), 12, 3.0f);
  std::copy(v.begin(), v.end(), x.data<float>());
  graph::Graph g;
  const int xi = g.variable("x", x);
  graph::OpBuilder b{g, nullptr, "t"};
  const int n0 = g.size();
  const int fused = graph::ops::log_softmax(b, xi, -1);
  std::set<graph::Op> ops;
  for (int i = n0; i < g.size(); ++i) ops.insert(g[i].op);
  EXPECT_EQ(ops, std::set<graph::Op>{graph::Op::LogSoftmax});
  const int composite = graph::ops::binary(b, graph::BinaryFn::subtract, xi,
                                           graph::ops::reduce(b, graph::ReduceFn::logsumexp, xi, {1}, true));
  const int first = graph::ops::log_softmax(b, xi, 0);
  EXPECT_NE(g[first].op, graph::Op::LogSoftmax);
  graph::Program p(std::move(g), {fused, composite}, {}, Device::cpu());
  p.run(graph::ExecContext{});
  const Tensor a = p.output(fused), c = p.output(composite);
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(a.data<float>()[i], c.data<float>()[i], 2e-6 * std::max(1.0f, std::abs(c.data<float>()[i]))) << i;
}

}  // namespace
}  // namespace tk
