// The epilogue fusion pass (graph/fuse.h) and the GEMM engines behind FusedMatMul (backends/cpu/gemm.h): the fused
// program computes what the unfused one does, holds fewer values, and both GEMM engines agree on every shape,
// transpose and epilogue; the engine chosen per shape travels in the training state.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include "backends/cpu/gemm.h"
#include "graph/autodiff.h"
#include "graph/fuse.h"
#include "graph/program.h"
#include "graph/schedule.h"
#include "program_feeder.h"
#include "test_data.h"
#include "trainkit/core/convert.h"
#include "trainkit/trainkit.h"

namespace tk::graph {
namespace {

// Dense(relu) -> Dense(relu) -> Dense(logits) with its gradients, as the Dense layer and autodiff emit them.
struct Mlp {
  Tensor w1, b1, w2, b2, w3, b3;
  Graph g;
  int x, y, loss;
  std::vector<int> grads;
  Mlp() {
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    auto init = [&](Shape s) {
      Tensor t = Tensor::zeros(s);
      for (int64_t i = 0; i < s.numel(); ++i) t.data<float>()[i] = nd(gen);
      return t;
    };
    w1 = init({96, 200}), b1 = init({200}), w2 = init({200, 64}), b2 = init({64}), w3 = init({64, 10}), b3 = init({10});
    x = g.input("x", {128, 96});
    y = g.input("y", {128}, DType::i32);
    std::vector<int> vars;
    int h = x;
    const std::pair<Tensor*, Tensor*> layers[] = {{&w1, &b1}, {&w2, &b2}, {&w3, &b3}};
    for (int l = 0; l < 3; ++l) {
      const std::string name = "dense_" + std::to_string(l);
      const int vw = g.variable(name + "/kernel", *layers[l].first), vb = g.variable(name + "/bias", *layers[l].second);
      vars.push_back(vw), vars.push_back(vb);
      h = g.add(Op::BiasAdd, {g.add(Op::MatMul, {h, vw}, {}, name + "/matmul"), vb}, {}, name + "/bias_add");
      if (l < 2) h = g.add(Op::Relu, {h}, {}, name + "/relu");
    }
    Attrs at;
    at.from_logits = true;
    loss = g.add(Op::SparseCceLoss, {h, y}, at, "loss");
    grads = gradients(g, {loss}, vars);
  }
  // The same batch every time: x ~ N(0, 1) from seed 1, labels i % 10.
  void feed(Program& p) const {
    std::mt19937 gen(1);
    std::normal_distribution<float> nd;
    float* xs = testing::ProgramFeeder::input<float>(p, x);
    int32_t* ys = testing::ProgramFeeder::input<int32_t>(p, y);
    for (int i = 0; i < 128 * 96; ++i) xs[i] = nd(gen);
    for (int i = 0; i < 128; ++i) ys[i] = i % 10;
  }
  std::vector<int> outputs() const {
    std::vector<int> o{loss};
    o.insert(o.end(), grads.begin(), grads.end());
    return o;
  }
};

std::vector<Tensor> run(Mlp& m, bool fuse, size_t* arena = nullptr, int* fused = nullptr) {
  const std::vector<int> outs = m.outputs();
  if (fuse) {
    const int n = fuse_epilogues(m.g, outs, outs);
    if (fused) *fused = n;
  }
  Program p(std::move(m.g), outs, {}, Device::cpu());
  m.feed(p);
  p.run(ExecContext{});
  if (arena) *arena = p.arena_bytes();
  std::vector<Tensor> out;
  for (int o : outs) out.push_back(p.output(o));
  return out;
}

double max_rel(const Tensor& got, const Tensor& want) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::abs(double(got.data<float>()[i]) - want.data<float>()[i]));
    mag = std::max(mag, std::abs(double(want.data<float>()[i])));
  }
  return err / std::max(mag, 1e-30);
}

TEST(FuseEpilogues, FusedProgramMatchesUnfusedWithFewerValues) {
  Mlp plain, fused;
  size_t arena_plain = 0, arena_fused = 0;
  int chains = 0;
  const std::vector<Tensor> want = run(plain, false, &arena_plain);
  const std::vector<Tensor> got = run(fused, true, &arena_fused, &chains);
  // Forward: 2 x (matmul+bias+relu) and 1 x (matmul+bias); backward: 2 x (input gradient + relu'), each also writing
  // its layer's bias gradient (the logits layer's BiasGrad reads the loss gradient and stays).
  EXPECT_EQ(chains, 7);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(max_rel(got[i], want[i]), 1e-5) << "output " << i;  // the same math; engines may round differently
  EXPECT_LT(arena_fused, arena_plain);
}

TEST(FuseEpilogues, LeavesChainsWhoseIntermediateIsReadElsewhereOrKept) {
  Tensor w = Tensor::full({8, 8}, 0.1f), b = Tensor::zeros({8});
  Graph g;
  const int x = g.input("x", {4, 8});
  const int mm = g.add(Op::MatMul, {x, g.variable("w", w)});
  const int ba = g.add(Op::BiasAdd, {mm, g.variable("b", b)});
  const int other = g.add(Op::Tanh, {mm});  // a second reader of the product
  EXPECT_EQ(fuse_epilogues(g, {ba, other}, {ba, other}), 0);
  EXPECT_EQ(g[ba].op, Op::BiasAdd);
  // Kept pre-activation: MatMul + BiasAdd fuse, the Relu stays separate.
  Graph h;
  const int x2 = h.input("x", {4, 8});
  const int ba2 = h.add(Op::BiasAdd, {h.add(Op::MatMul, {x2, h.variable("w", w)}), h.variable("b", b)});
  const int r2 = h.add(Op::Relu, {ba2});
  EXPECT_EQ(fuse_epilogues(h, {ba2, r2}, {ba2, r2}), 1);
  EXPECT_EQ(h[ba2].op, Op::FusedMatMul);
  EXPECT_EQ(h[ba2].attrs.epilogue, Op::kCount);
  EXPECT_EQ(h[r2].op, Op::Relu);
}

// A bfloat16 product cast to float32 (a weight's gradient under mixed_bfloat16) becomes one MatMul that writes
// float32: the float32 product of the bfloat16 operands, where the chain rounded it to bfloat16 first. float16
// chains stay: a float16 gradient that overflows must reach the finite check as inf.
TEST(FuseEpilogues, Bfloat16ProductCastToFloat32IsWrittenInFloat32) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    auto build = [&](Graph& g) {
      const int a = g.input("a", {33, 70}, t), b = g.input("b", {70, 41}, t);
      return std::array<int, 3>{a, b, g.cast(g.add(Op::MatMul, {a, b}, {}, "grad:dense/matmul"), DType::f32)};
    };
    Graph plain, fused;
    const auto [pa, pb, pout] = build(plain);
    const auto [fa, fb, fout] = build(fused);
    EXPECT_EQ(fuse_epilogues(fused, {fout}, {fout}), t == DType::bf16 ? 1 : 0);
    if (t == DType::bf16) {
      EXPECT_EQ(fused[fout].op, Op::MatMul);
      EXPECT_EQ(fused[fout].dtype, DType::f32);
      EXPECT_EQ(fused[fout].name, "grad:dense/matmul+cast");
    } else {
      EXPECT_EQ(fused[fout].op, Op::Cast);
    }
    // The same operands for both programs, and their float32 product as the reference.
    std::vector<float> av(33 * 70), bv(70 * 41);
    for (float& v : av) v = nd(gen);
    for (float& v : bv) v = nd(gen);
    std::vector<uint16_t> a16(av.size()), b16(bv.size());
    convert_elements(av.data(), DType::f32, a16.data(), t, av.size());
    convert_elements(bv.data(), DType::f32, b16.data(), t, bv.size());
    convert_elements(a16.data(), t, av.data(), DType::f32, av.size());  // the operands as the GEMM sees them
    convert_elements(b16.data(), t, bv.data(), DType::f32, bv.size());
    auto product = [&](Graph g, int a, int b, int out) {
      Program p(std::move(g), {out}, {}, Device::cpu());
      auto slot = [&](int value) -> void* {
        return t == DType::bf16 ? static_cast<void*>(testing::ProgramFeeder::input<bfloat16>(p, value))
                                : static_cast<void*>(testing::ProgramFeeder::input<float16>(p, value));
      };
      std::memcpy(slot(a), a16.data(), a16.size() * 2);
      std::memcpy(slot(b), b16.data(), b16.size() * 2);
      p.run(ExecContext{});
      return p.output(out);
    };
    const Tensor got_plain = product(std::move(plain), pa, pb, pout),
                 got_fused = product(std::move(fused), fa, fb, fout);
    double worst_fused = 0, worst_plain = 0;
    for (int i = 0; i < 33; ++i)
      for (int j = 0; j < 41; ++j) {
        double want = 0;
        for (int k = 0; k < 70; ++k) want += double(av[size_t(i * 70 + k)]) * bv[size_t(k * 41 + j)];
        const double scale = std::max(std::abs(want), 1.0);
        worst_fused = std::max(worst_fused, std::abs(got_fused.data<float>()[i * 41 + j] - want) / scale);
        worst_plain = std::max(worst_plain, std::abs(got_plain.data<float>()[i * 41 + j] - want) / scale);
      }
    if (t == DType::bf16) {
      EXPECT_LT(worst_fused, 1e-5);       // float32 accumulation, no rounding to 16 bits
      EXPECT_GT(worst_plain, 10 * 1e-5);  // the unfused chain rounds to bfloat16's 8 bits
    } else {
      EXPECT_GT(worst_fused, 1e-5);  // still rounded to float16, as the unfused chain is
    }
  }
}

// relu -> max pooling's backward pass: MaxPool2DGrad -> ReluGrad(., the pool's input) becomes one MaxPool2DGrad with
// the relu mask, bit for bit the two ops' result, for non-overlapping windows (the one-pass kernel), overlapping
// ones (summed, then masked) and the 16-bit kernels; a product read elsewhere, or kept, is left alone.
TEST(FuseEpilogues, MaxPoolGradientThroughARelu) {
  struct Win {
    int64_t k, s;
  };
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (Win w : {Win{2, 2}, Win{3, 1}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " window " + std::to_string(w.k) + " stride " + std::to_string(w.s));
      Attrs at;
      at.kernel[0] = at.kernel[1] = w.k, at.stride[0] = at.stride[1] = w.s, at.dilation[0] = at.dilation[1] = 1;
      const int64_t o = (8 - w.k) / w.s + 1;
      auto build = [&](Graph& g, bool kept_dx) {
        const int x = g.input("x", {2, 8, 8, 3}, t), dy = g.input("dy", {2, o, o, 3}, t);
        const int r = g.add(Op::Relu, {x}, {}, "conv/relu");
        const int p = g.add(Op::MaxPool2D, {r}, at, "pool");
        const int dx = g.add(Op::MaxPool2DGrad, {dy, r, p}, at, "grad:pool");
        const int out = g.add(Op::ReluGrad, {dx, r}, {}, "grad:conv/relu");
        return std::array<int, 4>{x, dy, out, dx};
      };
      // Inputs with many zeros after the relu and exact ties, in the dtype's own values.
      std::mt19937 gen(5);
      std::uniform_int_distribution<int> level(-3, 3);
      std::vector<float> xv(2 * 8 * 8 * 3), dv(static_cast<size_t>(2 * o * o * 3));
      for (float& v : xv) v = 0.25f * static_cast<float>(level(gen));
      for (float& v : dv) v = 0.5f + static_cast<float>(level(gen));
      auto run_graph = [&](Graph g, const std::array<int, 4>& ids, std::vector<int> outs) {
        Program prog(std::move(g), outs, {}, Device::cpu());
        auto fill = [&](int id, const std::vector<float>& v) {
          void* slot = t == DType::f32    ? static_cast<void*>(testing::ProgramFeeder::input<float>(prog, id))
                       : t == DType::bf16 ? static_cast<void*>(testing::ProgramFeeder::input<bfloat16>(prog, id))
                                          : static_cast<void*>(testing::ProgramFeeder::input<float16>(prog, id));
          convert_elements(v.data(), DType::f32, slot, t, v.size());
        };
        fill(ids[0], xv);
        fill(ids[1], dv);
        prog.run(ExecContext{});
        return prog.output(outs[0]).to(DType::f32);
      };
      Graph plain, fused, kept;
      const auto pi = build(plain, false), fi = build(fused, false), ki = build(kept, true);
      EXPECT_EQ(fuse_epilogues(fused, {fi[2]}, {fi[2]}), 1);
      EXPECT_EQ(fused[fi[2]].op, Op::MaxPool2DGrad);
      EXPECT_EQ(fused[fi[2]].attrs.epilogue, Op::ReluGrad);
      EXPECT_EQ(fuse_epilogues(kept, {ki[2], ki[3]}, {ki[2], ki[3]}), 0);  // dx is read after the run
      const Tensor want = run_graph(std::move(plain), pi, {pi[2]}), got = run_graph(std::move(fused), fi, {fi[2]});
      ASSERT_EQ(want.numel(), got.numel());
      EXPECT_EQ(std::memcmp(want.raw(), got.raw(), want.nbytes()), 0);
      int zeroed = 0;
      for (int64_t i = 0; i < want.numel(); ++i) zeroed += xv[static_cast<size_t>(i)] <= 0.0f;
      EXPECT_GT(zeroed, 0);  // the mask had work to do
    }
}

// ---------------------------------------------------------------- the bias gradient as a second output
// X -> BiasGrad: X's kernel writes the column sums of its output while it writes the output (graph/fuse.h). The
// output itself is bit for bit the unfused one; the bias gradient is the same sum in another order (fixed chunks of
// rows, column_sums.h), so it agrees with the unfused BiasGrad and with a double reference to float rounding, and it
// is the same bits with 1 and 2 threads.
struct BiasGradCase {
  std::string label;
  std::function<std::array<int, 3>(Graph&)> build;  // -> {the op writing dz, dz's BiasGrad, ops to fuse}
  std::vector<std::pair<Shape, bool>> inputs;       // shape, all positive (else N(0, 1))
};

struct BiasGradResult {
  Tensor dz, db;
  int fused = 0;
  size_t arena = 0;
};

BiasGradResult run_bias_grad(const BiasGradCase& c, bool fuse, int threads) {
  Graph g;
  const auto [dz, db, expected] = c.build(g);
  BiasGradResult r;
  if (fuse) {
    r.fused = fuse_epilogues(g, {dz, db}, {dz, db});
    EXPECT_EQ(r.fused, expected) << c.label;
    EXPECT_TRUE(g[db].attrs.side_output) << c.label;
    EXPECT_TRUE(g[dz].attrs.side_output) << c.label;
  }
  std::vector<int> inputs;
  for (int id = 0; id < g.size(); ++id)
    if (g[id].op == Op::Input) inputs.push_back(id);
  Program p(std::move(g), {dz, db}, {}, Device::cpu());
  std::mt19937 gen(9);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < inputs.size(); ++i) {
    float* v = testing::ProgramFeeder::input<float>(p, inputs[i]);
    for (int64_t k = 0; k < c.inputs[i].first.numel(); ++k) v[k] = c.inputs[i].second ? std::abs(nd(gen)) : nd(gen);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  p.run(ExecContext{});
  omp_set_num_threads(saved);
  r.dz = p.output(dz), r.db = p.output(db);
  r.arena = p.arena_bytes();
  return r;
}

std::vector<BiasGradCase> bias_grad_cases() {
  std::vector<BiasGradCase> cases;
  // Dense + relu's backward pass: the next layer's input gradient times relu' (FusedMatMul), then its BiasGrad.
  // 512 x 256: four chunks.
  cases.push_back(
      {"dense relu_grad",
       [](Graph& g) {
         const int d = g.input("dnext", {512, 64}), w = g.input("w", {256, 64}), y = g.input("y", {512, 256});
         Attrs at;
         at.trans_b = true;
         const int mm = g.add(Op::MatMul, {d, w}, at, "grad:dense_1/matmul");
         const int dz = g.add(Op::ReluGrad, {mm, y}, {}, "grad:dense/relu");
         return std::array<int, 3>{dz, g.add(Op::BiasGrad, {dz}, {}, "grad:dense/bias_add"), 2};
       },
       {{{512, 64}, false}, {{256, 64}, false}, {{512, 256}, false}}});
  // Conv + relu + max pooling (the tutorial CNN's first block at batch 8), 2x2 windows and overlapping 3x3 / 1 ones.
  for (const auto& [k, st] : {std::pair<int64_t, int64_t>{2, 2}, {3, 1}}) {
    const int64_t o = (28 - k) / st + 1;
    cases.push_back({"conv relu pool " + std::to_string(k) + "/" + std::to_string(st),
                     [k = k, st = st](Graph& g) {
                       Attrs at;
                       at.kernel[0] = at.kernel[1] = k, at.stride[0] = at.stride[1] = st;
                       const int64_t oo = (28 - k) / st + 1;
                       const int x = g.input("x", {8, 28, 28, 32}), dy = g.input("dy", {8, oo, oo, 32});
                       const int r = g.add(Op::Relu, {x}, {}, "conv/relu");
                       const int pool = g.add(Op::MaxPool2D, {r}, at, "pool");
                       const int dx = g.add(Op::MaxPool2DGrad, {dy, r, pool}, at, "grad:pool");
                       const int dz = g.add(Op::ReluGrad, {dx, r}, {}, "grad:conv/relu");
                       return std::array<int, 3>{dz, g.add(Op::BiasGrad, {dz}, {}, "grad:conv/bias_add"), 2};
                     },
                     {{{8, 28, 28, 32}, false}, {{8, o, o, 32}, false}}});
  }
  // Conv + relu followed by another convolution: ReluGrad alone writes the bias gradient.
  cases.push_back({"conv relu",
                   [](Graph& g) {
                     const int dy = g.input("dy", {8, 14, 14, 64}), y = g.input("y", {8, 14, 14, 64});
                     const int dz = g.add(Op::ReluGrad, {dy, g.add(Op::Relu, {y})}, {}, "grad:conv/relu");
                     return std::array<int, 3>{dz, g.add(Op::BiasGrad, {dz}, {}, "grad:conv/bias_add"), 1};
                   },
                   {{{8, 14, 14, 64}, false}, {{8, 14, 14, 64}, false}}});
  return cases;
}

TEST(FuseBiasGradient, TheProducerWritesItWhileWritingItsOutput) {
  for (const BiasGradCase& c : bias_grad_cases()) {
    SCOPED_TRACE(c.label);
    const BiasGradResult plain = run_bias_grad(c, false, 2), fused = run_bias_grad(c, true, 2),
                         one_thread = run_bias_grad(c, true, 1);
    ASSERT_EQ(plain.dz.nbytes(), fused.dz.nbytes());
    // The output itself: the same op, except that a product may come from another GEMM engine (chosen per shape,
    // epilogue and thread count by measurement, gemm.h), which rounds differently.
    EXPECT_LT(max_rel(fused.dz, plain.dz), 1e-6) << "the output itself changed";
    if (c.label != "dense relu_grad")
      EXPECT_EQ(std::memcmp(plain.dz.raw(), fused.dz.raw(), plain.dz.nbytes()), 0) << "the output itself changed";
    if (std::memcmp(fused.dz.raw(), one_thread.dz.raw(), fused.dz.nbytes()) == 0)  // the same output: the same sums
      EXPECT_EQ(std::memcmp(fused.db.raw(), one_thread.db.raw(), fused.db.nbytes()), 0)
          << "the sum depends on the thread count";
    // Against the column sums in double: both are that sum rounded (up to the order of double additions).
    const int64_t n = fused.db.numel(), rows = fused.dz.numel() / n;
    double worst = 0.0;
    int nonzero = 0;
    for (int64_t j = 0; j < n; ++j) {
      double want = 0.0, mag = 0.0;
      for (int64_t r = 0; r < rows; ++r) {
        want += double(plain.dz.data<float>()[r * n + j]);
        mag += std::abs(double(plain.dz.data<float>()[r * n + j]));
      }
      nonzero += want != 0.0;
      for (const Tensor* t : {&plain.db, &fused.db})
        worst = std::max(worst, std::abs(double(t->data<float>()[j]) - want) / std::max(mag, 1e-30));
    }
    EXPECT_LT(worst, 1e-7);
    EXPECT_GT(nonzero, 0);
    // The bias gradient now lives from its producer's step: at most its own bytes more.
    EXPECT_LE(fused.arena, plain.arena + (fused.db.nbytes() + 63) / 64 * 64);
  }
}

// The bias gradient's storage is written by its producer's kernel: the planner must keep it apart from everything
// alive at that step (the producer's inputs and output), though the BiasGrad itself is scheduled later.
TEST(FuseBiasGradient, ThePlanKeepsItApartFromTheProducersOperands) {
  for (const BiasGradCase& c : bias_grad_cases()) {
    SCOPED_TRACE(c.label);
    Graph g;
    const auto [dz, db, expected] = c.build(g);
    fuse_epilogues(g, {dz, db}, {dz, db});
    const std::vector<int> order = schedule(g, {dz, db});
    const MemoryPlan plan = plan_memory(g, order, {dz, db}, Device::cpu());
    const size_t db_at = static_cast<size_t>(plan.offset[static_cast<size_t>(db)]);
    const size_t db_bytes = static_cast<size_t>(g[db].shape.numel()) * sizeof(float);
    EXPECT_EQ(plan.first_use[static_cast<size_t>(db)], plan.first_use[static_cast<size_t>(dz)]);
    std::vector<int> alive{dz};
    for (int in : g[dz].inputs) alive.push_back(in);
    for (int v : alive) {
      if (plan.offset[static_cast<size_t>(v)] < 0) continue;
      const size_t at = static_cast<size_t>(plan.offset[static_cast<size_t>(v)]);
      const size_t bytes = static_cast<size_t>(g[v].shape.numel()) * dtype_size(g[v].dtype);
      EXPECT_TRUE(db_at + db_bytes <= at || at + bytes <= db_at) << g[v].name << " overlaps the bias gradient";
    }
  }
}

// TK_FUSE_BIAS_GRAD=0 keeps the BiasGrad a kernel of its own (the A/B switch); 16-bit gradients keep it too.
TEST(FuseBiasGradient, LeftAloneWhenSwitchedOffOrNotFloat32) {
  Graph g;
  const int dy = g.input("dy", {4, 6, 6, 8}, DType::bf16), y = g.input("y", {4, 6, 6, 8}, DType::bf16);
  const int dz = g.add(Op::ReluGrad, {dy, y});
  const int db = g.add(Op::BiasGrad, {dz});
  EXPECT_EQ(fuse_epilogues(g, {dz, db}, {dz, db}), 0);
  EXPECT_FALSE(g[db].attrs.side_output);
  Graph h;
  const int dy2 = h.input("dy", {4, 6, 6, 8}), y2 = h.input("y", {4, 6, 6, 8});
  const int dz2 = h.add(Op::ReluGrad, {dy2, y2});
  const int db2 = h.add(Op::BiasGrad, {dz2});
  setenv("TK_FUSE_BIAS_GRAD", "0", 1);
  EXPECT_EQ(fuse_epilogues(h, {dz2, db2}, {dz2, db2}), 0);
  unsetenv("TK_FUSE_BIAS_GRAD");
  EXPECT_EQ(fuse_epilogues(h, {dz2, db2}, {dz2, db2}), 1);
}

// Adam updates of every variable of the Mlp, one program with one AdamUpdate per variable and one with the
// updates grouped by readiness; returns the variables after two steps.
std::vector<Tensor> train_twice(bool grouped, int* groups = nullptr) {
  Mlp m;
  UpdateConfig cfg;
  cfg.update_op = Op::AdamUpdate;
  cfg.clipnorm = 0.05f;  // per variable, as Keras: the group must keep it per variable
  std::vector<Tensor> slots;
  Tensor* vars[] = {&m.w1, &m.b1, &m.w2, &m.b2, &m.w3, &m.b3};
  for (Tensor* v : vars) slots.push_back(Tensor::zeros(v->shape())), slots.push_back(Tensor::zeros(v->shape()));
  std::vector<int> sinks;
  for (size_t i = 0; i < 6; ++i) {
    Attrs at;
    at.update = &cfg;
    int var = -1;
    for (int id = 0; id < m.g.size(); ++id)
      if (m.g[id].op == Op::Variable && m.g[id].attrs.external == vars[i]->raw()) var = id;
    sinks.push_back(m.g.add(Op::AdamUpdate,
                            {var, m.grads[i], m.g.variable("m" + std::to_string(i), slots[2 * i]),
                             m.g.variable("v" + std::to_string(i), slots[2 * i + 1])},
                            at, "update"));
  }
  if (grouped) {
    sinks = group_updates(m.g, sinks);
    if (groups) *groups = static_cast<int>(sinks.size());
    for (int s : sinks) EXPECT_EQ(m.g[s].op, Op::MultiUpdate);
  }
  Program p(std::move(m.g), {m.loss}, sinks, Device::cpu());
  m.feed(p);
  ExecContext ctx;
  ctx.scalars.learning_rate = 0.01f;
  for (int step = 0; step < 2; ++step, ++ctx.scalars.iterations) p.run(ctx);
  std::vector<Tensor> out;
  for (Tensor* v : vars) out.push_back(v->clone());
  return out;
}

TEST(GroupUpdates, OneKernelPerLayerComputesTheSameBits) {
  int groups = 0;
  const std::vector<Tensor> single = train_twice(false), grouped = train_twice(true, &groups);
  EXPECT_EQ(groups, 3);  // kernel and bias of each layer are ready together
  for (size_t i = 0; i < single.size(); ++i)
    EXPECT_EQ(std::memcmp(single[i].raw(), grouped[i].raw(), single[i].nbytes()), 0) << "variable " << i;
}

// ---------------------------------------------------------------- the engines

struct Buffers {
  std::vector<float> a, b, bias, y;
  explicit Buffers(const cpu::GemmShape& s)
      : a(size_t(s.m * s.k)), b(size_t(s.k * s.n)), bias(size_t(s.n)), y(size_t(s.m * s.n)) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto* v : {&a, &b, &bias, &y})
      for (float& f : *v) f = u(gen);
  }
};

std::vector<float> compute(const cpu::GemmShape& s, const Buffers& in, const char* engine) {
  const std::string key = std::to_string(s.m) + "," + std::to_string(s.n) + "," + std::to_string(s.k) + "," +
                          (s.ta ? "1" : "0") + "," + (s.tb ? "1" : "0") + ",";
  static const char* names[] = {"none", "bias", "bias_relu", "relu", "relu_grad"};
  cpu::set_gemm_choices(key + names[static_cast<int>(s.epilogue)] + "," + std::to_string(omp_get_max_threads()) + "=" +
                        engine);
  std::vector<float> ws(cpu::gemm_workspace(s) / sizeof(float) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
  std::vector<float> c(size_t(s.m * s.n), -7.0f);
  cpu::gemm(s, in.a.data(), in.b.data(), in.bias.data(), in.y.data(), c.data(), aligned);
  return c;
}

// The product computed in double, then the epilogue.
std::vector<double> reference(const cpu::GemmShape& s, const Buffers& in) {
  std::vector<double> c(size_t(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < s.k; ++p)
        acc += double(in.a[size_t(s.ta ? p * s.m + i : i * s.k + p)]) * in.b[size_t(s.tb ? j * s.k + p : p * s.n + j)];
      const size_t at = size_t(i * s.n + j);
      switch (s.epilogue) {
        case cpu::Epilogue::bias:
          acc += in.bias[size_t(j)];
          break;
        case cpu::Epilogue::bias_relu:
          acc = std::max(acc + in.bias[size_t(j)], 0.0);
          break;
        case cpu::Epilogue::relu:
          acc = std::max(acc, 0.0);
          break;
        case cpu::Epilogue::relu_grad:
          acc = in.y[at] > 0 ? acc : 0.0;
          break;
        default:
          break;
      }
      c[at] = acc;
    }
  return c;
}

TEST(GemmEngines, OpenBlasAndOneDnnAgreeOnEveryTransposeAndEpilogue) {
  std::vector<const char*> engines{"openblas"};
  if (cpu::onednn_gemm_available()) engines.push_back("onednn");
  int checked = 0;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 53, 29}, {128, 96, 200}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int e = 0; e < 5; ++e) {
          const cpu::GemmShape s{m, n, k, ta, tb, static_cast<cpu::Epilogue>(e)};
          const Buffers in(s);
          const std::vector<double> want = reference(s, in);
          for (const char* engine : engines) {
            const std::vector<float> got = compute(s, in, engine);
            double err = 0, mag = 0;
            for (size_t i = 0; i < want.size(); ++i)
              err = std::max(err, std::abs(got[i] - want[i])), mag = std::max(mag, std::abs(want[i]));
            EXPECT_LT(err / mag, 1e-5) << engine << " m=" << m << " n=" << n << " k=" << k << " ta=" << ta
                                       << " tb=" << tb << " epilogue=" << e;
            ++checked;
          }
        }
  EXPECT_EQ(checked, 2 * 4 * 5 * static_cast<int>(engines.size()));
  // The choices made above are listed, and a listed choice is what the next call uses.
  const std::string choices = cpu::gemm_choices();
  EXPECT_NE(choices.find("128,96,200,1,1,relu_grad," + std::to_string(omp_get_max_threads()) + "=" + engines.back()),
            std::string::npos)
      << choices;
}

TEST(GemmEngines, TheTrainingStateCarriesTheChoicesPerShape) {
  tk::Sequential model({tk::layers::Input({64}), tk::layers::Dense(256, "relu"), tk::layers::Dense(10)});
  model.compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const Tensor x = tk::testing::uniform({512, 64}, 1), y = tk::testing::int_labels(512, 10, 2);
  tk::FitOptions fo;
  fo.batch_size = 128;
  fo.verbose = 0;
  model.fit(x, y, fo);
  const TrainingState s = model.training_state();
  // The first layer's forward GEMM (128 x 256 x 64, 4.2 MFLOP) is large enough to be measured.
  EXPECT_NE(s.kernel_choices.find("128,256,64,0,0,bias_relu,"), std::string::npos) << s.kernel_choices;
  // Restoring a state makes its choices current (here: flipping every engine, as another run might have chosen).
  TrainingState flipped = s;
  std::string& c = flipped.kernel_choices;
  for (size_t at = 0; (at = c.find('=', at)) != std::string::npos; ++at) {
    const size_t end = c.find(';', at);
    const std::string engine = c.substr(at + 1, end - at - 1);
    c.replace(at + 1, end - at - 1, engine == "openblas" && cpu::onednn_gemm_available() ? "onednn" : "openblas");
  }
  model.restore_training_state(flipped);
  const std::string now = cpu::gemm_choices();
  for (size_t at = 0, end; (end = c.find(';', at)) != std::string::npos; at = end + 1)
    EXPECT_NE(now.find(c.substr(at, end - at)), std::string::npos) << c.substr(at, end - at) << " not in " << now;
}

// A run resumed after the last step builds no program, yet its state must name the engines its backup did (the
// kill -9 test compares the final states byte for byte: tests/kill_resume.sh failed 2 times in 10 without this).
TEST(GemmEngines, AResumedModelThatBuildsNoProgramKeepsTheRestoredChoices) {
  auto make = [] {
    auto m = std::make_unique<tk::Sequential>(
        std::vector<tk::LayerPtr>{tk::layers::Input({64}), tk::layers::Dense(256, "relu"), tk::layers::Dense(10)});
    m->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    return m;
  };
  const std::unique_ptr<tk::Sequential> trained = make();
  tk::FitOptions fo;
  fo.batch_size = 128;
  fo.verbose = 0;
  trained->fit(tk::testing::uniform({512, 64}, 1), tk::testing::int_labels(512, 10, 2), fo);
  const TrainingState s = trained->training_state();
  ASSERT_FALSE(s.kernel_choices.empty());
  const std::unique_ptr<tk::Sequential> resumed = make();
  resumed->restore_training_state(s);
  EXPECT_EQ(resumed->training_state().kernel_choices, s.kernel_choices);
}

}  // namespace
}  // namespace tk::graph
