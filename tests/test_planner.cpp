// The static memory planner: values alive at the same time never share bytes, the arena is smaller
// than the sum of all buffers, and results equal those of an unshared layout.
#include <gtest/gtest.h>

#include <random>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "program_feeder.h"

namespace tk::graph {
namespace {

struct Mlp {
  Tensor w1 = Tensor::full({16, 32}, 0.05f), b1 = Tensor::zeros({32}), w2 = Tensor::full({32, 8}, -0.03f);
  Graph g;
  int x, y, loss;
  std::vector<int> grads;
  Mlp() {
    x = g.input("x", {64, 16});
    y = g.input("y", {64}, DType::i32);
    int vw1 = g.variable("w1", w1), vb1 = g.variable("b1", b1), vw2 = g.variable("w2", w2);
    int h = g.add(Op::Relu, {g.add(Op::BiasAdd, {g.add(Op::MatMul, {x, vw1}), vb1})});
    int h2 = g.add(Op::Tanh, {h});
    Attrs at;
    at.from_logits = true;
    loss = g.add(Op::SparseCceLoss, {g.add(Op::MatMul, {h2, vw2}), y}, at);
    grads = gradients(g, {loss}, {vw1, vb1, vw2});
  }
};

TEST(Planner, LiveValuesNeverOverlapAndTheArenaIsSmallerThanTheSum) {
  Mlp m;
  std::vector<int> roots{m.loss};
  roots.insert(roots.end(), m.grads.begin(), m.grads.end());
  std::vector<int> order = schedule(m.g, roots);
  MemoryPlan plan = plan_memory(m.g, order, roots, Device::cpu());
  EXPECT_LT(plan.arena_bytes, plan.unplanned_bytes);
  int placed = 0;
  for (int a : order)
    for (int b : order) {
      if (a >= b || plan.offset[size_t(a)] < 0 || plan.offset[size_t(b)] < 0) continue;
      const bool live_together = !(plan.last_use[size_t(a)] < plan.first_use[size_t(b)] ||
                                   plan.last_use[size_t(b)] < plan.first_use[size_t(a)]);
      const int64_t sa = m.g[a].shape.numel() * 4, sb = m.g[b].shape.numel() * 4;
      const int64_t oa = plan.offset[size_t(a)], ob = plan.offset[size_t(b)];
      const bool share_bytes = oa < ob + sb && ob < oa + sa;
      EXPECT_FALSE(live_together && share_bytes) << m.g[a].name << " and " << m.g[b].name;
      ++placed;
    }
  EXPECT_GT(placed, 10);
  for (int id : order)
    if (plan.offset[size_t(id)] >= 0) EXPECT_EQ(plan.offset[size_t(id)] % int64_t(kArenaAlignment), 0);
}

TEST(Planner, SharedArenaGivesTheSameResultsAsOneBufferPerValue) {
  Mlp a, b;
  std::vector<int> outs{a.loss, a.grads[0], a.grads[1], a.grads[2]};
  Program shared(std::move(a.g), outs, {}, Device::cpu());
  std::vector<int> everything;
  for (int id = 0; id < b.g.size(); ++id)
    if (b.g[id].op != Op::Variable) everything.push_back(id);  // all kept alive: nothing is reused
  Program separate(std::move(b.g), everything, {}, Device::cpu());
  EXPECT_LT(shared.arena_bytes(), separate.arena_bytes());
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  using testing::ProgramFeeder;
  float* xa = ProgramFeeder::input<float>(shared, a.x);
  float* xb = ProgramFeeder::input<float>(separate, b.x);
  int32_t* ya = ProgramFeeder::input<int32_t>(shared, a.y);
  int32_t* yb = ProgramFeeder::input<int32_t>(separate, b.y);
  for (int i = 0; i < 64 * 16; ++i) xa[i] = xb[i] = nd(gen);
  for (int i = 0; i < 64; ++i) ya[i] = yb[i] = i % 8;
  ExecContext ctx;
  shared.run(ctx);
  separate.run(ctx);
  for (size_t k = 0; k < outs.size(); ++k) {
    const int64_t n = shared.graph()[outs[k]].shape.numel();
    const Tensor sa = shared.output(outs[k]), sb = separate.output(outs[k]);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sa.data<float>()[i], sb.data<float>()[i]) << "output " << k;
  }
}

TEST(Scheduler, UpdatesRunAfterEveryReaderOfTheVariable) {
  Tensor w = Tensor::full({4, 4}, 0.1f), slot = Tensor::zeros({4, 4});
  UpdateConfig cfg;
  cfg.momentum = 0.9f;  // SGD with momentum: one slot
  Graph g;
  int x = g.input("x", {2, 4});
  int t = g.input("t", {2, 4});
  int vw = g.variable("w", w);
  int loss = g.add(Op::MseLoss, {g.add(Op::MatMul, {g.add(Op::MatMul, {x, vw}), vw}), t});
  std::vector<int> grads = gradients(g, {loss}, {vw});
  Attrs at;
  at.update = &cfg;
  int upd = g.add(Op::SgdUpdate, {vw, grads[0], g.variable("slot", slot)}, at);
  std::vector<int> order = schedule(g, {loss, upd});
  const auto pos = [&](int id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
  for (int id : order)
    for (int in : g[id].inputs)
      if (in == vw && id != upd) EXPECT_LT(pos(id), pos(upd)) << g[id].name << " reads w after its update";
}

}  // namespace
}  // namespace tk::graph
