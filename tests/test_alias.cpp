// The reshape-aliasing pass (graph/alias.h): a Reshape of an arena value becomes a View of it — the program computes
// the same values (forward and gradients), runs no copy kernel for it and plans less memory; a Reshape of a Variable
// keeps its copy; a model trains to the same weights with the pass on and off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "graph/alias.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "program_feeder.h"
#include "trainkit/trainkit.h"

namespace tk::graph {
namespace {

// x (8, 6, 4) -> Reshape (48, 4) -> MatMul w (4, 5) -> Reshape (8, 30) -> Tanh -> Reshape (240) -> Sum, and dw.
struct Net {
  Tensor w = Tensor::zeros({4, 5});
  Graph g;
  int x, flat, mm, back, t, loss, dw, wflat;
  Net() {
    for (int i = 0; i < 20; ++i) w.data<float>()[i] = 0.05f * static_cast<float>(i - 9);
    x = g.input("x", {8, 6, 4});
    Attrs to;
    to.shape = Shape{48, 4};
    flat = g.add(Op::Reshape, {x}, to, "flat");
    const int vw = g.variable("w", w);
    mm = g.add(Op::MatMul, {flat, vw}, {}, "mm");
    to.shape = Shape{8, 30};
    back = g.add(Op::Reshape, {mm}, to, "back");
    t = g.add(Op::Tanh, {back}, {}, "tanh");
    to.shape = Shape{240};
    const int line = g.add(Op::Reshape, {t}, to, "line");
    Attrs sum;
    sum.reduce = ReduceFn::sum;
    sum.axes = 1u;
    loss = g.add(Op::Reduce, {line}, sum, "loss");
    dw = gradients(g, {loss}, {vw})[0];
    to.shape = Shape{20};
    wflat = g.add(Op::Reshape, {vw}, to, "w_flat");  // a Variable's reshape: outside the arena, stays a copy
  }
};

struct Result {
  std::vector<Tensor> out;
  size_t arena = 0;
  size_t copies = 0;  // Reshape kernels the program runs
};

Result run(bool alias, int* aliased = nullptr) {
  Net n;
  if (alias) {
    const int k = alias_reshapes(n.g);
    if (aliased) *aliased = k;
  }
  const std::vector<int> outs{n.loss, n.dw, n.t, n.wflat};
  const Graph& g = n.g;
  const bool wflat_stays = g[n.wflat].op == Op::Reshape;
  EXPECT_TRUE(wflat_stays);
  Program p(std::move(n.g), outs, {}, Device::cpu());
  float* xs = testing::ProgramFeeder::input<float>(p, n.x);
  for (int i = 0; i < 8 * 6 * 4; ++i) xs[i] = 0.01f * static_cast<float>((i * 7) % 31 - 15);
  p.run(ExecContext{});
  Result r;
  for (int o : outs) r.out.push_back(p.output(o).clone());
  r.arena = p.arena_bytes();
  for (int id : p.order()) r.copies += p.graph()[id].op == Op::Reshape;
  return r;
}

TEST(AliasReshapes, ComputesTheSameWithoutCopiesAndWithLessMemory) {
  int aliased = 0;
  const Result plain = run(false), viewed = run(true, &aliased);
  EXPECT_GE(aliased, 3);  // flat, back, line and the gradient's reshapes; never w_flat
  ASSERT_EQ(plain.out.size(), viewed.out.size());
  for (size_t i = 0; i < plain.out.size(); ++i) {
    ASSERT_EQ(plain.out[i].shape(), viewed.out[i].shape()) << "output " << i;
    EXPECT_EQ(0, std::memcmp(plain.out[i].raw(), viewed.out[i].raw(), plain.out[i].nbytes())) << "output " << i;
  }
  EXPECT_EQ(viewed.copies, 1u);  // w_flat
  EXPECT_GT(plain.copies, 3u);
  EXPECT_LT(viewed.arena, plain.arena);
}

// Flatten and Reshape layers in a model: the same weights after two epochs with the pass (TK_FUSE on) as without
// (TK_FUSE=0 turns off the fusion passes, this one with them; the fused bias epilogues may round differently, so
// within 1e-5 — a View reading the wrong memory would be off by far more).
TEST(AliasReshapes, AModelWithReshapesTrainsTheSameWithAndWithoutThePass) {
  auto train = [](const char* fuse) {
    setenv("TK_FUSE", fuse, 1);
    utils::set_random_seed(11);
    Sequential m({layers::Input({6, 6, 2}), layers::Conv2D(4, 3), layers::Flatten(), layers::Reshape({4, 16}),
                  layers::Dense(3, "tanh"), layers::Flatten(), layers::Dense(2)});
    m.compile(optimizers::SGD(), "mse");
    Tensor x = Tensor::zeros({16, 6, 6, 2}), y = Tensor::zeros({16, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.02f * static_cast<float>(i % 17 - 8);
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = 0.1f * static_cast<float>(i % 5);
    FitOptions o;
    o.epochs = 2;
    o.batch_size = 8;
    o.shuffle = false;
    o.verbose = 0;
    m.fit(x, y, o);
    unsetenv("TK_FUSE");
    return m.get_weights();
  };
  const std::vector<Tensor> off = train("0"), on = train("1");
  ASSERT_EQ(off.size(), on.size());
  for (size_t i = 0; i < on.size(); ++i) {
    ASSERT_EQ(off[i].numel(), on[i].numel());
    for (int64_t k = 0; k < on[i].numel(); ++k)
      EXPECT_NEAR(off[i].data<float>()[k], on[i].data<float>()[k], 1e-5) << "weight " << i << " element " << k;
  }
}

}  // namespace
}  // namespace tk::graph
