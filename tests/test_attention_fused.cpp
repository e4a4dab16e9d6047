// The fused attention op (graph/attention_rules.h) against the composite it replaces in MultiHeadAttention's training
// programs (BatchMatMul, Where, Softmax, BatchMatMul over (N, H, T, S), autodiff's gradient), forward and gradients,
// on shapes that take every path of the CPU kernel: one block (T, S <= 128), several query and key blocks with tails,
// causal (whole key blocks skipped past the diagonal), a mask hiding whole query rows; and the MultiHeadAttention
// layer's training program: the fused op, no (N, H, T, S) value, a smaller plan than the composite's.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "graph/attention_rules.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/losses.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk::graph {
namespace {

struct Dims {
  int64_t n, t, s, h, d, dv;
};

// The largest |got - want| over the largest |want|.
double rel_error(const Tensor& got, const Tensor& want) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::abs(double(got.data<float>()[i]) - want.data<float>()[i]));
    mag = std::max(mag, std::abs(double(want.data<float>()[i])));
  }
  return err / std::max(mag, 1e-30);
}

// (N*L, H*dim) -> (N, H, L, dim)
int heads_first(OpBuilder& b, int x, int64_t n, int64_t l, int64_t h, int64_t dim) {
  return ops::transpose(b, ops::reshape(b, x, Shape{n, l, h, dim}), {0, 2, 1, 3});
}

// MultiHeadAttention's composite over q, k, v in the fused op's layout, with `mask` (N, T, S) 0/1 already holding the
// causal part, or -1.
int composite(OpBuilder& b, const Dims& x, int q, int k, int v, int mask) {
  const int qh = ops::mul_scalar(b, heads_first(b, q, x.n, x.t, x.h, x.d), 1.0f / std::sqrt(float(x.d)));
  int scores = ops::batch_matmul(b, qh, heads_first(b, k, x.n, x.s, x.h, x.d), false, true);  // (N, H, T, S)
  int cond = -1;
  if (mask >= 0) {
    const int m = ops::reshape(b, mask, Shape{x.n, 1, x.t, x.s});
    cond = ops::compare(b, BinaryFn::greater, m, ops::scalar(b, 0.5f, m));
    scores = ops::where(b, cond, scores, ops::scalar(b, -1e9f, scores));
  }
  int probs = ops::softmax(b, scores, -1);
  if (cond >= 0) probs = ops::where(b, cond, probs, ops::scalar(b, 0.0f, probs));
  const int o = ops::batch_matmul(b, probs, heads_first(b, v, x.n, x.s, x.h, x.dv));  // (N, H, T, Dv)
  return ops::reshape(b, ops::transpose(b, o, {0, 2, 1, 3}), Shape{x.n * x.t, x.h * x.dv});
}

void expect_fused_matches_composite(const Dims& x, bool causal, bool with_mask) {
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  auto random = [&](Shape s) {
    Tensor t(std::move(s), DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(gen);
    return t;
  };
  Tensor q = random({x.n * x.t, x.h * x.d}), k = random({x.n * x.s, x.h * x.d}), v = random({x.n * x.s, x.h * x.dv});
  Tensor r = random({x.n * x.t, x.h * x.dv});  // the loss is sum(o * r)
  Tensor mask = Tensor::full({x.n, x.t, x.s}, 1.0f), combined = Tensor::full({x.n, x.t, x.s}, 1.0f);
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t i = 0; i < x.t; ++i)
      for (int64_t j = 0; j < x.s; ++j) {
        const int64_t e = (n * x.t + i) * x.s + j;
        if (with_mask && ((n == 0 && i == 2) || (3 * i + j) % 7 == 0)) mask.data<float>()[e] = 0.0f;
        combined.data<float>()[e] = mask.data<float>()[e] * ((causal && j > i) ? 0.0f : 1.0f);
      }
  Graph g;
  OpBuilder b{g, nullptr, "test"};
  const int qv = g.variable("q", q), kv = g.variable("k", k), vv = g.variable("v", v), rv = g.variable("r", r);
  std::vector<int> in = {qv, kv, vv};
  if (with_mask) in.push_back(g.variable("mask", mask));
  Attrs at;
  at.heads = x.h, at.batch = x.n, at.causal = causal, at.score_scale = 1.0f / std::sqrt(float(x.d));
  const int fused = g.add(Op::Attention, in, at);
  const int plain = composite(b, x, qv, kv, vv, with_mask || causal ? g.variable("combined", combined) : -1);
  auto loss = [&](int o) {
    return ops::reduce(b, ReduceFn::sum, ops::binary(b, BinaryFn::multiply, o, rv), {0, 1}, false);
  };
  const std::vector<int> gf = gradients(g, {loss(fused)}, {qv, kv, vv});
  const std::vector<int> gp = gradients(g, {loss(plain)}, {qv, kv, vv});
  std::vector<int> outs = {fused, plain};
  outs.insert(outs.end(), gf.begin(), gf.end());
  outs.insert(outs.end(), gp.begin(), gp.end());
  Program p(std::move(g), outs, {}, Device::cpu());
  p.run(ExecContext{});
  const Tensor of = p.output(fused), op = p.output(plain);
  EXPECT_LT(rel_error(of, op), 2e-6) << "output";
  for (int64_t i = 0; i < of.numel(); ++i) ASSERT_TRUE(std::isfinite(of.data<float>()[i])) << "output " << i;
  if (with_mask)  // sample 0's query row 2 sees no key: 0, as the composite's zeroed probabilities give
    for (int64_t e = 0; e < x.h * x.dv; ++e) EXPECT_EQ(of.data<float>()[2 * x.h * x.dv + e], 0.0f);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_error(p.output(gf[i]), p.output(gp[i])), 1e-5) << names[i];
}

TEST(AttentionFused, OneBlockMatchesTheComposite) {
  expect_fused_matches_composite({2, 128, 128, 4, 32, 32}, false, false);
}
TEST(AttentionFused, OneBlockCausalMatchesTheComposite) {
  expect_fused_matches_composite({2, 100, 100, 2, 16, 16}, true, false);
}
TEST(AttentionFused, BlocksWithTailsMatchTheComposite) {
  expect_fused_matches_composite({2, 200, 300, 2, 16, 8}, false, false);
}
TEST(AttentionFused, CausalBlocksMatchTheComposite) {
  expect_fused_matches_composite({1, 300, 260, 3, 20, 24}, true, false);
}
TEST(AttentionFused, MaskedBlocksMatchTheComposite) {
  expect_fused_matches_composite({2, 140, 270, 2, 8, 8}, false, true);
}
TEST(AttentionFused, MaskedCausalMatchesTheComposite) {
  expect_fused_matches_composite({2, 9, 11, 2, 4, 5}, true, true);
}

TEST(AttentionFused, ResultsDoNotDependOnTheThreadCount) {
  // Every sum runs in one thread in a fixed order: the same bits with one thread and with the team.
  const Dims x{2, 150, 150, 2, 8, 8};
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> u(-1, 1);
    Tensor q = Tensor::zeros({x.n * x.t, x.h * x.d}), k = Tensor::zeros({x.n * x.s, x.h * x.d});
    Tensor v = Tensor::zeros({x.n * x.s, x.h * x.dv});
    for (Tensor* t : {&q, &k, &v})
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = u(gen);
    Graph g;
    OpBuilder b{g, nullptr, "test"};
    const int qv = g.variable("q", q), kv = g.variable("k", k), vv = g.variable("v", v);
    Attrs at;
    at.heads = x.h, at.batch = x.n, at.causal = true, at.score_scale = 0.3f;
    const int o = g.add(Op::Attention, {qv, kv, vv}, at);
    const std::vector<int> d = gradients(g, {ops::reduce(b, ReduceFn::sum, o, {0, 1}, false)}, {qv, kv, vv});
    Program p(std::move(g), {o, d[0], d[1], d[2]}, {}, Device::cpu());
    p.run(ExecContext{});
    std::vector<Tensor> out = {p.output(o), p.output(d[0]), p.output(d[1]), p.output(d[2])};
    omp_set_num_threads(saved);
    return out;
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i)
    for (int64_t e = 0; e < one[i].numel(); ++e)
      ASSERT_EQ(one[i].data<float>()[e], two[i].data<float>()[e]) << "output " << i << " element " << e;
}

TEST(AttentionFused, BadShapesNameTheOpAndTheShapes) {
  Tensor q = Tensor::zeros({6, 8}), k = Tensor::zeros({8, 8}), v = Tensor::zeros({8, 6});
  Graph g;
  const int qv = g.variable("q", q), kv = g.variable("k", k), vv = g.variable("v", v);
  Attrs at;
  at.heads = 2, at.batch = 4;  // 6 query rows are not 4 samples
  try {
    g.add(Op::Attention, {qv, kv, vv}, at, "mha");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Attention 'mha'"), std::string::npos) << m;
    EXPECT_NE(m.find("(6, 8)"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tk::graph

namespace tk {
namespace {

// A transformer block's MultiHeadAttention in a training program runs the fused op and keeps no (N, H, T, S) value;
// its dropout > 0 keeps the composite (a dropped probability needs the scores), and the plan sees the difference.
TEST(AttentionFused, MultiHeadAttentionTrainsWithTheFusedOpAndASmallerPlan) {
  auto make = [](float dropout) {
    const KerasTensor in = Input({64, 32});
    const KerasTensor a = layers::MultiHeadAttention(4, 8, {.dropout = dropout})({in, in});
    auto m = std::make_unique<Model>(in, layers::Add()({in, a}));
    m->compile(optimizers::SGD(), "mse");
    return m;
  };
  auto fused = make(0.0f), composite = make(0.1f);
  const MemoryPlan pf = fused->memory_plan(16), pc = composite->memory_plan(16);
  // The composite keeps (16, 4, 64, 64) scores and probabilities (256 KiB each) for its gradient.
  EXPECT_LT(pf.total + (size_t{256} << 10), pc.total) << pf.to_string() << "\n" << pc.to_string();
  Tensor x = Tensor::full({16, 64, 32}, 0.25f), y = Tensor::zeros({16, 64, 32});
  const double before = fused->train_on_batch({x}, {y}).get("loss");
  for (int i = 0; i < 5; ++i) fused->train_on_batch({x}, {y});
  EXPECT_LT(fused->train_on_batch({x}, {y}).get("loss"), before);
}

}  // namespace
}  // namespace tk
