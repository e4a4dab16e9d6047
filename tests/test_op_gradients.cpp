// Finite-difference gradient test for every differentiable op, plus an end-to-end check of autodiff.
//
// To add a case: append a Case to cases() with the op, its input shapes and which inputs are
// differentiable; the harness builds y = op(inputs), asks the op's gradient rule for dL/dx with
// L = sum(y * r) for a random r, and compares with central differences of L.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "graph/autodiff.h"
#include "graph/program.h"

namespace tk::graph {
namespace {

struct Case {
  std::string label;
  Op op;
  std::vector<Shape> inputs;
  std::vector<bool> differentiable;
  Attrs attrs = {};
  // Fills input i (default: uniform in [-2, 2] away from 0, where activations have kinks).
  std::function<void(int, float*, int64_t, std::mt19937&)> init = nullptr;
  std::vector<DType> dtypes = {};
  float step = 1e-2f;  // relative finite-difference step; ops linear in each input can take a larger one
};

void default_init(int, float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> mag(0.1f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) p[i] = sign(gen) ? mag(gen) : -mag(gen);
}
void probs_init(int, float* p, int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(0.1f, 0.9f);
  for (int64_t i = 0; i < n; ++i) p[i] = u(gen);
}
// Input 0 in (0.1, 0.9) (probabilities), input 1 targets in [0, 1].
void prob_target_init(int i, float* p, int64_t n, std::mt19937& gen) { probs_init(i, p, n, gen); }

std::vector<Case> cases() {
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
  c.push_back({"BiasAdd rank3", Op::BiasAdd, {{2, 3, 4}, {4}}, {true, true}});
  c.push_back({"Add", Op::Add, {{3, 4}, {3, 4}}, {true, true}});
  c.push_back({"Add3", Op::Add, {{3, 4}, {3, 4}, {3, 4}}, {true, true, true}});
  c.push_back({"Mul", Op::Mul, {{3, 4}, {3, 4}}, {true, true}});
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
  // Images (NHWC). Window attributes: kernel, stride, dilation, pad (top, bottom, left, right).
  auto win = [](int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, std::array<int64_t, 4> pad) {
    Attrs at;
    at.kernel[0] = kh, at.kernel[1] = kw, at.stride[0] = sh, at.stride[1] = sw, at.dilation[0] = dh,
    at.dilation[1] = dw;
    for (int i = 0; i < 4; ++i) at.pad[i] = pad[static_cast<size_t>(i)];
    return at;
  };
  // Conv2D is linear in each input, so a large step costs no truncation error and beats float rounding.
  for (auto [label, xs, ws, at] :
       {std::tuple{"Conv2D valid", Shape{2, 5, 4, 3}, Shape{3, 2, 3, 4}, win(3, 2, 1, 1, 1, 1, {0, 0, 0, 0})},
        std::tuple{"Conv2D same odd pad", Shape{2, 5, 6, 2}, Shape{3, 2, 2, 3}, win(3, 2, 1, 1, 1, 1, {1, 1, 0, 1})},
        std::tuple{"Conv2D stride2", Shape{2, 7, 6, 2}, Shape{3, 3, 2, 2}, win(3, 3, 2, 2, 1, 1, {1, 1, 0, 1})},
        std::tuple{"Conv2D dilation2", Shape{1, 7, 7, 2}, Shape{3, 3, 2, 2}, win(3, 3, 1, 1, 2, 2, {2, 2, 2, 2})}}) {
    Case cc{label, Op::Conv2D, {xs, ws}, {true, true}, at};
    cc.step = 0.25f;
    c.push_back(cc);
  }
  // Pooling inputs: distinct values 0.1 apart, so a finite-difference step never changes the maximum.
  auto spaced = [](int, float* p, int64_t n, std::mt19937& g) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    for (int64_t i = 0; i < n; ++i) p[i] = 0.1f * static_cast<float>(perm[static_cast<size_t>(i)]) - 2.0f;
  };
  c.push_back({"MaxPool2D 2x2", Op::MaxPool2D, {{2, 4, 5, 2}}, {true}, win(2, 2, 2, 2, 1, 1, {0, 0, 0, 0}), spaced});
  c.push_back(
      {"MaxPool2D 3x3 s2 same", Op::MaxPool2D, {{2, 5, 6, 2}}, {true}, win(3, 3, 2, 2, 1, 1, {1, 1, 1, 1}), spaced});
  c.push_back({"AvgPool2D 2x2", Op::AvgPool2D, {{2, 4, 4, 3}}, {true}, win(2, 2, 2, 2, 1, 1, {0, 0, 0, 0})});
  c.push_back({"AvgPool2D 3x3 s2 same", Op::AvgPool2D, {{2, 5, 5, 2}}, {true}, win(3, 3, 2, 2, 1, 1, {1, 1, 1, 1})});
  c.push_back({"Pad2D", Op::Pad2D, {{2, 3, 2, 2}}, {true}, win(1, 1, 1, 1, 1, 1, {1, 2, 0, 3})});
  c.push_back({"Crop2D", Op::Crop2D, {{2, 5, 6, 2}}, {true}, win(1, 1, 1, 1, 1, 1, {1, 2, 0, 3})});
  {
    Attrs at;
    at.kernel[0] = 2, at.kernel[1] = 3;
    c.push_back({"Upsample2D", Op::Upsample2D, {{2, 2, 3, 2}}, {true}, at});
  }
  {
    Attrs at;
    at.epsilon = 1e-3f;
    auto bn_init = [](int i, float* p, int64_t n, std::mt19937& g) {
      if (i == 2) {  // moving variance: positive
        std::uniform_real_distribution<float> u(0.5f, 1.5f);
        for (int64_t k = 0; k < n; ++k) p[k] = u(g);
      } else {
        default_init(i, p, n, g);
      }
    };
    c.push_back({"BnInference",
                 Op::BnInference,
                 {{3, 2, 2, 4}, {4}, {4}, {4}, {4}},
                 {true, false, false, false, false},
                 at,
                 bn_init});
  }
  c.push_back({"MseLoss", Op::MseLoss, {{4, 3}, {4, 3}}, {true, false}});
  for (bool logits : {true, false}) {
    Attrs at;
    at.from_logits = logits;
    auto init =
        logits
            ? std::function<void(int, float*, int64_t, std::mt19937&)>([](int i, float* p, int64_t n, std::mt19937& g) {
                i == 0 ? default_init(i, p, n, g) : probs_init(i, p, n, g);
              })
            : prob_target_init;
    const std::string sfx = logits ? " logits" : " probs";
    c.push_back({"BceLoss" + sfx, Op::BceLoss, {{4, 3}, {4, 3}}, {true, false}, at, init});
    c.push_back({"CceLoss" + sfx, Op::CceLoss, {{4, 5}, {4, 5}}, {true, false}, at, init});
    Case sparse{"SparseCceLoss" + sfx,   Op::SparseCceLoss, {{4, 5}, {4}}, {true, false}, at, nullptr,
                {DType::f32, DType::i32}};
    sparse.init = [logits](int i, float* p, int64_t n, std::mt19937& g) {
      if (i == 1) {
        auto* labels = reinterpret_cast<int32_t*>(p);
        for (int64_t k = 0; k < n; ++k) labels[k] = static_cast<int32_t>((k * 3 + 1) % 5);
      } else if (logits) {
        default_init(i, p, n, g);
      } else {
        probs_init(i, p, n, g);
      }
    };
    c.push_back(sparse);
  }
  return c;
}

class OpGradient : public ::testing::TestWithParam<Case> {};

TEST_P(OpGradient, MatchesCentralDifferences) {
  const Case& tc = GetParam();
  std::mt19937 gen(7);
  Graph g;
  std::vector<int> in;
  for (size_t i = 0; i < tc.inputs.size(); ++i)
    in.push_back(g.input("x" + std::to_string(i), tc.inputs[i], tc.dtypes.empty() ? DType::f32 : tc.dtypes[i]));
  const int y = g.add(tc.op, in, tc.attrs, "y");
  const int dy = g.input("dy", g[y].shape);
  std::vector<int> dx(in.size(), -1);
  std::vector<char> need(in.size());
  for (size_t i = 0; i < in.size(); ++i) need[i] = tc.differentiable[i];
  GradBuilder b{g};
  op_info(tc.op).grad(b, y, dy, reinterpret_cast<const bool*>(need.data()), dx.data());
  std::vector<int> outputs{y};
  for (size_t i = 0; i < in.size(); ++i)
    if (tc.differentiable[i]) {
      ASSERT_GE(dx[i], 0) << "no gradient emitted for input " << i;
      ASSERT_EQ(g[dx[i]].shape, tc.inputs[i]) << "gradient shape of input " << i;
      outputs.push_back(dx[i]);
    }
  Program p(std::move(g), outputs);

  for (size_t i = 0; i < in.size(); ++i) {
    const int64_t n = tc.inputs[i].numel();
    if (tc.init)
      tc.init(static_cast<int>(i), p.data_f(in[i]), n, gen);
    else
      default_init(static_cast<int>(i), p.data_f(in[i]), n, gen);
  }
  const int64_t ny = p.graph()[y].shape.numel();
  std::uniform_real_distribution<float> ur(-1.0f, 1.0f);
  for (int64_t k = 0; k < ny; ++k) p.data_f(dy)[k] = ur(gen);

  ExecContext ctx;
  auto objective = [&]() {
    p.run(ctx);
    double s = 0;
    for (int64_t k = 0; k < ny; ++k) s += double(p.data_f(y)[k]) * double(p.data_f(dy)[k]);
    return s;
  };
  objective();
  int checked = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!tc.differentiable[i]) continue;
    const int64_t n = tc.inputs[i].numel();
    objective();  // at the unperturbed point (the previous input's loop ended on a perturbed run)
    std::vector<float> analytic(p.data_f(dx[i]), p.data_f(dx[i]) + n);
    float* x = p.data_f(in[i]);
    for (int64_t k = 0; k < n; ++k) {
      const float h = tc.step * std::max(1.0f, std::abs(x[k]));
      const float saved = x[k];
      x[k] = saved + h;
      const double up = objective();
      x[k] = saved - h;
      const double down = objective();
      x[k] = saved;
      const double numeric = (up - down) / (2.0 * double(h));
      EXPECT_NEAR(analytic[static_cast<size_t>(k)], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << tc.label << ": d/dx" << i << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradient, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string s = info.param.label;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
});

TEST(OpGradientCoverage, EveryDifferentiableOpHasACase) {
  std::set<Op> covered;
  for (const Case& c : cases()) covered.insert(c.op);
  covered.insert(Op::BnApply);  // through its batch statistics: BatchNorm.TrainingGradientMatchesFiniteDifferences
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    if (info.grad)
      EXPECT_TRUE(covered.count(info.op)) << info.name << " has a gradient rule but no finite-difference case";
  }
}

// Autodiff over a small DAG with fan-out (a value used twice) and a frozen branch.
TEST(Autodiff, TwoLayerNetworkWithFanOutMatchesFiniteDifferences) {
  Tensor w1 = Tensor::zeros({4, 6}), b1 = Tensor::zeros({6}), w2 = Tensor::zeros({6, 3});
  std::mt19937 gen(3);
  for (Tensor* t : {&w1, &b1, &w2}) default_init(0, t->data<float>(), t->numel(), gen);
  Graph g;
  int x = g.input("x", {5, 4});
  int label = g.input("y", {5}, DType::i32);
  int vw1 = g.variable("w1", w1), vb1 = g.variable("b1", b1), vw2 = g.variable("w2", w2);
  int h = g.add(Op::Tanh, {g.add(Op::BiasAdd, {g.add(Op::MatMul, {x, vw1}), vb1})});
  int h2 = g.add(Op::Add, {h, g.add(Op::Mul, {h, h})});  // h used three times
  Attrs logits;
  logits.from_logits = true;
  int loss = g.add(Op::SparseCceLoss, {g.add(Op::MatMul, {h2, vw2}), label}, logits);
  std::vector<int> grads = gradients(g, {loss}, {vw1, vb1, vw2});
  Program p(std::move(g), {loss, grads[0], grads[1], grads[2]});
  default_init(0, p.data_f(x), 20, gen);
  auto* lab = static_cast<int32_t*>(p.data(label));
  for (int i = 0; i < 5; ++i) lab[i] = i % 3;
  ExecContext ctx;
  p.run(ctx);
  std::vector<Tensor*> vars{&w1, &b1, &w2};
  for (size_t v = 0; v < vars.size(); ++v) {
    std::vector<float> analytic(p.data_f(grads[v]), p.data_f(grads[v]) + vars[v]->numel());
    float* w = vars[v]->data<float>();
    for (int64_t k = 0; k < vars[v]->numel(); ++k) {
      const float saved = w[k], step = 1e-2f;
      w[k] = saved + step;
      p.run(ctx);
      const double up = *p.data_f(loss);
      w[k] = saved - step;
      p.run(ctx);
      const double down = *p.data_f(loss);
      w[k] = saved;
      EXPECT_NEAR(analytic[static_cast<size_t>(k)], (up - down) / (2 * step),
                  2e-3 + 1e-2 * std::abs(analytic[static_cast<size_t>(k)]))
          << "var " << v << " elem " << k;
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

// BnApply's gradient includes the path through BnStats(x), so it is checked on the composition.
TEST(BatchNorm, TrainingGradientMatchesFiniteDifferences) {
  std::mt19937 gen(11);
  Tensor gamma = Tensor::zeros({3}), beta = Tensor::zeros({3});
  for (Tensor* t : {&gamma, &beta}) default_init(0, t->data<float>(), 3, gen);
  Graph g;
  int x = g.input("x", {4, 2, 2, 3});
  int r = g.input("r", {4, 2, 2, 3});
  int vg = g.variable("gamma", gamma), vb = g.variable("beta", beta);
  Attrs at;
  at.epsilon = 1e-3f;
  int stats = g.add(Op::BnStats, {x}, at);
  int y = g.add(Op::BnApply, {x, stats, vg, vb}, at);
  int loss = g.add(Op::MseLoss, {y, r});
  // x as a "variable" for autodiff: differentiate with respect to the input node itself.
  std::vector<int> grads = gradients(g, {loss}, {x, vg, vb});
  Program p(std::move(g), {loss, grads[0], grads[1], grads[2]});
  default_init(0, p.data_f(x), 48, gen);
  default_init(0, p.data_f(r), 48, gen);
  ExecContext ctx;
  p.run(ctx);
  std::vector<std::pair<float*, int>> params{
      {p.data_f(x), grads[0]}, {gamma.data<float>(), grads[1]}, {beta.data<float>(), grads[2]}};
  for (auto& [values, grad] : params) {
    const int64_t n = p.graph()[grad].shape.numel();
    std::vector<float> analytic(p.data_f(grad), p.data_f(grad) + n);
    for (int64_t k = 0; k < n; ++k) {
      const float saved = values[k], h = 1e-2f;
      values[k] = saved + h;
      p.run(ctx);
      const double up = *p.data_f(loss);
      values[k] = saved - h;
      p.run(ctx);
      const double down = *p.data_f(loss);
      values[k] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[size_t(k)], numeric, 2e-3 + 2e-2 * std::abs(numeric)) << "grad " << grad << " elem " << k;
    }
  }
}

TEST(OpTable, ShapeErrorsNameTheOpAndShapes) {
  Graph g;
  int a = g.input("a", {3, 4});
  int b = g.input("b", {5, 6});
  try {
    g.add(Op::MatMul, {a, b}, {}, "dense/matmul");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MatMul"), std::string::npos) << m;
    EXPECT_NE(m.find("dense/matmul"), std::string::npos) << m;
    EXPECT_NE(m.find("(3, 4)"), std::string::npos) << m;
    EXPECT_NE(m.find("(5, 6)"), std::string::npos) << m;
  }
  EXPECT_EQ(g.size(), 2) << "a failed add must not leave a node behind";
}

TEST(Kernels, MissingKernelIsAnErrorNamingOpAndDevice) {
  try {
    find_kernel(DeviceKind::cuda, Op::MatMul, DType::f32);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("MatMul"), std::string::npos);
    EXPECT_NE(m.find("cuda:0"), std::string::npos);
  }
  for (int i = 0; i < kOpCount; ++i) {
    Op op = static_cast<Op>(i);
    if (op == Op::Input || op == Op::Variable) continue;
    EXPECT_TRUE(has_kernel(DeviceKind::cpu, op, DType::f32)) << op_name(op) << " has no CPU float32 kernel";
  }
}

TEST(Kernels, DropoutMaskKeepsTheRateAndDependsOnlyOnSeedAndStep) {
  Graph g;
  Attrs at;
  at.alpha = 0.3f;
  at.seed = 99;
  at.shape = Shape{200, 500};
  int m = g.add(Op::DropoutMask, {}, at);
  Program p(std::move(g), {m});
  ExecContext ctx;
  ctx.step = 5;
  p.run(ctx);
  std::vector<float> first(p.data_f(m), p.data_f(m) + 100000);
  int64_t zeros = 0;
  for (float v : first) {
    if (v == 0.0f)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(v, 1.0f / 0.7f);
  }
  EXPECT_NEAR(double(zeros) / 100000.0, 0.3, 0.01);
  p.run(ctx);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), p.data_f(m))) << "same seed and step must give the same mask";
  ctx.step = 6;
  p.run(ctx);
  EXPECT_FALSE(std::equal(first.begin(), first.end(), p.data_f(m))) << "a new step must give a new mask";
}

}  // namespace
}  // namespace tk::graph
