// Gradient buckets (graph/bucket.h): which gradients share a bucket, where the schedule reduces it, where the planner
// puts the gradients' Views, and that a program hands every gradient its own sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "graph/autodiff.h"
#include "graph/bucket.h"
#include "graph/program.h"
#include "program_feeder.h"

namespace tk::graph {
namespace {

// Three layers: the backward pass makes the last layer's gradients first.
struct Net {
  Tensor w1 = Tensor::full({16, 32}, 0.05f), b1 = Tensor::zeros({32}), w2 = Tensor::full({32, 8}, -0.03f),
         b2 = Tensor::full({8}, 0.01f), w3 = Tensor::full({8, 3}, 0.02f);
  Graph g;
  int x, y, loss;
  std::vector<int> grads;
  std::vector<std::string> names{"w1", "b1", "w2", "b2", "w3"};
  Net() {
    x = g.input("x", {64, 16});
    y = g.input("y", {64}, DType::i32);
    const int vw1 = g.variable("w1", w1), vb1 = g.variable("b1", b1), vw2 = g.variable("w2", w2),
              vb2 = g.variable("b2", b2), vw3 = g.variable("w3", w3);
    const int h1 = g.add(Op::Relu, {g.add(Op::BiasAdd, {g.add(Op::MatMul, {x, vw1}), vb1})});
    const int h2 = g.add(Op::Tanh, {g.add(Op::BiasAdd, {g.add(Op::MatMul, {h1, vw2}), vb2})});
    Attrs at;
    at.from_logits = true;
    loss = g.add(Op::SparseCceLoss, {g.add(Op::MatMul, {h2, vw3}), y}, at);
    grads = gradients(g, {loss}, {vw1, vb1, vw2, vb2, vw3});
  }
  int64_t bytes(size_t i) const { return bucket_slot(g[grads[i]].shape.numel()) * 4; }
};

std::vector<int> all_reduces(const Graph& g) {
  std::vector<int> out;
  for (int id = 0; id < g.size(); ++id)
    if (g[id].op == Op::AllReduce) out.push_back(id);
  return out;
}

TEST(Bucket, GradientsShareABucketInTheOrderTheBackwardPassMakesThem) {
  Net m;
  const std::vector<int> grads = m.grads;
  const std::vector<int> reduced = add_all_reduces(m.g, grads, m.names, {});
  const std::vector<int> buckets = all_reduces(m.g);
  ASSERT_EQ(buckets.size(), 1u);
  const Node& b = m.g[buckets[0]];
  ASSERT_EQ(b.inputs.size(), 5u);
  EXPECT_TRUE(std::is_sorted(b.inputs.begin(), b.inputs.end())) << "inputs in order of readiness (node ids)";
  EXPECT_EQ(b.inputs.front(), *std::min_element(grads.begin(), grads.end()));  // w3's, made first
  EXPECT_EQ(b.shape, Shape{bucket_elements(m.g, buckets[0])});
  int64_t slots = 0;
  for (size_t i = 0; i < grads.size(); ++i) slots += m.bytes(i) / 4;
  EXPECT_EQ(b.shape.numel(), slots);
  const std::vector<int64_t> offsets = bucket_offsets(m.g, buckets[0]);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Node& v = m.g[reduced[i]];
    ASSERT_EQ(v.op, Op::View) << m.names[i];
    EXPECT_EQ(v.inputs[0], buckets[0]);
    EXPECT_EQ(v.shape, m.g[grads[i]].shape);
    EXPECT_EQ(v.name, m.names[i] + "/all_reduce");
    const size_t k = static_cast<size_t>(std::find(b.inputs.begin(), b.inputs.end(), grads[i]) - b.inputs.begin());
    EXPECT_EQ(v.attrs.begin, offsets[k]);
    EXPECT_EQ(v.attrs.begin % 16, 0) << "64-byte aligned";
  }
  EXPECT_NE(b.name.find("5 gradients"), std::string::npos) << b.name;
}

TEST(Bucket, ABucketClosesBeforeTheGradientThatWouldOverfillIt) {
  Net m;
  // w3 (8x3 -> 32 floats), b2 (8 -> 16), w2 (32x8), b1 (32), w1 (16x32): a cap of w3 + b2 + w2 closes after w2.
  std::vector<size_t> made(m.grads.size());
  for (size_t i = 0; i < made.size(); ++i) made[i] = i;
  std::sort(made.begin(), made.end(), [&](size_t a, size_t b) { return m.grads[a] < m.grads[b]; });
  const size_t cap = static_cast<size_t>(m.bytes(made[0]) + m.bytes(made[1]) + m.bytes(made[2]));
  add_all_reduces(m.g, m.grads, m.names, {.bucket_bytes = cap});
  const std::vector<int> buckets = all_reduces(m.g);
  // w3, b2, w2 | b1 (b1 + w1 would pass the cap) | w1
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(m.g[buckets[0]].inputs.size(), 3u);
  EXPECT_EQ(m.g[buckets[1]].inputs, std::vector<int>{m.grads[made[3]]});
  EXPECT_EQ(m.g[buckets[2]].inputs, std::vector<int>{m.grads[made[4]]});
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(m.g[buckets[size_t(k)]].attrs.begin, k);  // the collectives' numbers

  Net alone;  // a cap below every gradient: one AllReduce per gradient, no Views, as before buckets
  const std::vector<int> reduced = add_all_reduces(alone.g, alone.grads, alone.names, {.bucket_bytes = 1});
  EXPECT_EQ(all_reduces(alone.g).size(), alone.grads.size());
  for (size_t i = 0; i < reduced.size(); ++i) {
    EXPECT_EQ(alone.g[reduced[i]].op, Op::AllReduce);
    EXPECT_EQ(alone.g[reduced[i]].shape, alone.g[alone.grads[i]].shape);
    EXPECT_EQ(alone.g[reduced[i]].name, alone.names[i] + "/all_reduce");
  }
}

TEST(Bucket, TheScheduleReducesABucketAsSoonAsItsLastGradientIsReady) {
  Net m;
  const std::vector<int> reduced = add_all_reduces(m.g, m.grads, m.names, {.bucket_bytes = 64 * 4});
  std::vector<int> roots = reduced;
  roots.push_back(m.loss);
  const std::vector<int> order = schedule(m.g, roots);
  const auto pos = [&](int id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
  const std::vector<int> buckets = all_reduces(m.g);
  ASSERT_GE(buckets.size(), 2u);
  for (int b : buckets) {
    int64_t last = -1;
    for (int in : m.g[b].inputs) last = std::max<int64_t>(last, pos(in));
    EXPECT_EQ(pos(b), last + 1) << m.g[b].name << " waits after its last gradient";
  }
  for (int v : reduced)
    if (m.g[v].op == Op::View) EXPECT_GT(pos(v), pos(m.g[v].inputs[0]));
  // The first bucket (the last layer's gradients) is reduced while the backward pass still has work to do.
  EXPECT_LT(pos(buckets[0]), pos(*std::max_element(m.grads.begin(), m.grads.end())));
}

TEST(Bucket, ViewsLiveInsideTheirBucketWhichLivesAsLongAsTheyAreRead) {
  Net m;
  const std::vector<int> reduced = add_all_reduces(m.g, m.grads, m.names, {});
  const int bucket = all_reduces(m.g)[0];
  // Each View read by a later op (as an update would): the bucket must outlive the last of them.
  std::vector<int> roots{m.loss};
  for (int v : reduced) roots.push_back(m.g.add(Op::Relu, {v}, {}, m.g[v].name + "/reader"));
  const std::vector<int> order = schedule(m.g, roots);
  const MemoryPlan plan = plan_memory(m.g, order, roots, Device::cpu());
  const int64_t base = plan.offset[size_t(bucket)];
  ASSERT_GE(base, 0);
  for (int v : reduced) {
    EXPECT_EQ(plan.offset[size_t(v)], base + m.g[v].attrs.begin * 4) << m.g[v].name;
    EXPECT_GE(plan.last_use[size_t(bucket)], plan.last_use[size_t(v)]);
  }
  // No other value lives in the bucket's bytes while it is alive.
  const int64_t bucket_end = base + m.g[bucket].shape.numel() * 4;
  for (int id : order) {
    if (id == bucket || m.g[id].op == Op::View || plan.offset[size_t(id)] < 0) continue;
    const bool live_together = !(plan.last_use[size_t(id)] < plan.first_use[size_t(bucket)] ||
                                 plan.last_use[size_t(bucket)] < plan.first_use[size_t(id)]);
    const int64_t o = plan.offset[size_t(id)], e = o + m.g[id].shape.numel() * 4;
    EXPECT_FALSE(live_together && o < bucket_end && base < e) << m.g[id].name << " overlaps the bucket";
  }
}

TEST(Bucket, AProgramGivesEveryGradientItsOwnScaledSum) {
  // Without a collective (one replica) the bucket holds each gradient times this replica's share: each View must
  // read exactly its own gradient's values, bit for bit.
  Net m;
  const std::vector<int> grads = m.grads;
  const std::vector<int> reduced = add_all_reduces(m.g, grads, m.names, {});
  std::vector<int> outs = grads;
  outs.insert(outs.end(), reduced.begin(), reduced.end());
  Program p(std::move(m.g), outs, {}, Device::cpu());
  std::mt19937 gen(3);
  std::normal_distribution<float> nd;
  float* x = testing::ProgramFeeder::input<float>(p, m.x);
  int32_t* y = testing::ProgramFeeder::input<int32_t>(p, m.y);
  for (int i = 0; i < 64 * 16; ++i) x[i] = nd(gen);
  for (int i = 0; i < 64; ++i) y[i] = i % 3;
  ExecContext ctx;
  ctx.scalars.grad_scale = 0.5f;
  p.run(ctx);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor g = p.output(grads[i]), r = p.output(reduced[i]);
    ASSERT_EQ(g.shape(), r.shape());
    for (int64_t k = 0; k < g.numel(); ++k)
      ASSERT_EQ(r.data<float>()[k], g.data<float>()[k] * 0.5f) << m.names[i] << " element " << k;
  }
}

TEST(Bucket, OverlappingBucketsStartEarlyAndAreWaitedForAfterTheBackwardPass) {
  Net m;
  const std::vector<int> grads = m.grads;
  const std::vector<int> reduced =
      add_all_reduces(m.g, grads, m.names, {.bucket_bytes = 64 * 4, .overlap = true});  // several buckets
  std::vector<int> roots = reduced;
  roots.push_back(m.loss);
  const std::vector<int> order = schedule(m.g, roots);
  const auto pos = [&](int id) { return std::find(order.begin(), order.end(), id) - order.begin(); };
  const int64_t last_gradient = pos(*std::max_element(grads.begin(), grads.end()));
  std::vector<int> waits;
  for (int id = 0; id < m.g.size(); ++id)
    if (m.g[id].op == Op::AllReduceWait) waits.push_back(id);
  const std::vector<int> buckets = all_reduces(m.g);
  ASSERT_EQ(waits.size(), buckets.size());
  ASSERT_GE(buckets.size(), 2u);
  for (size_t k = 0; k < buckets.size(); ++k) {
    EXPECT_TRUE(m.g[buckets[k]].attrs.overlap);
    EXPECT_EQ(m.g[waits[k]].inputs[0], buckets[k]);
    EXPECT_GT(pos(waits[k]), last_gradient) << "waited for after the backward pass";
  }
  EXPECT_LT(pos(buckets[0]), last_gradient) << "the first bucket starts while the backward pass runs";
  for (size_t i = 0; i < reduced.size(); ++i) {  // every sum is read through its bucket's wait
    const Node& r = m.g[reduced[i]];
    EXPECT_TRUE(r.op == Op::AllReduceWait || (r.op == Op::View && m.g[r.inputs[0]].op == Op::AllReduceWait))
        << m.names[i];
  }
  // The wait is the bucket's memory: the planner puts it at the bucket's offset.
  const MemoryPlan plan = plan_memory(m.g, order, roots, Device::cpu());
  for (size_t k = 0; k < buckets.size(); ++k) EXPECT_EQ(plan.offset[size_t(waits[k])], plan.offset[size_t(buckets[k])]);
  // A wait must read an overlapping AllReduce.
  Graph g;
  const int x = g.input("x", {4});
  EXPECT_THROW(g.add(Op::AllReduceWait, {x}, {}, "not started"), InvalidArgument);
}

TEST(Bucket, OverlappingTheFirstBucketIsAtMostOneMebibyte) {
  Graph g;  // "gradients" of 0.25, 0.5, 0.5, 2 and 3 MiB, all ready at once (sources keep their order)
  std::vector<int> grads;
  for (int64_t kib : {256, 512, 512, 2048, 3072}) grads.push_back(g.input("g" + std::to_string(kib), {kib * 256}));
  const std::vector<std::string> names{"a", "b", "c", "d", "e"};
  add_all_reduces(g, grads, names, {.overlap = true});
  std::vector<int> buckets = all_reduces(g);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(g[buckets[0]].inputs, (std::vector<int>{grads[0], grads[1]}));  // 0.75 MiB: c would pass 1 MiB
  EXPECT_EQ(g[buckets[1]].inputs, (std::vector<int>{grads[2], grads[3], grads[4]}));
  Graph plain;  // without overlap: one 25 MiB bucket
  std::vector<int> same;
  for (int64_t kib : {256, 512, 512, 2048, 3072}) same.push_back(plain.input("g" + std::to_string(kib), {kib * 256}));
  add_all_reduces(plain, same, names, {});
  EXPECT_EQ(all_reduces(plain).size(), 1u);
}

TEST(Bucket, AnOverlappingProgramWithoutACollectiveGivesEveryGradientItsScaledSum) {
  Net m;
  const std::vector<int> grads = m.grads;
  const std::vector<int> reduced = add_all_reduces(m.g, grads, m.names, {.bucket_bytes = 64 * 4, .overlap = true});
  std::vector<int> outs = grads;
  outs.insert(outs.end(), reduced.begin(), reduced.end());
  Program p(std::move(m.g), outs, {}, Device::cpu());
  float* x = testing::ProgramFeeder::input<float>(p, m.x);
  int32_t* y = testing::ProgramFeeder::input<int32_t>(p, m.y);
  for (int i = 0; i < 64 * 16; ++i) x[i] = static_cast<float>((i * 37) % 17) / 17.0f - 0.5f;
  for (int i = 0; i < 64; ++i) y[i] = i % 3;
  ExecContext ctx;
  ctx.scalars.grad_scale = 0.25f;
  p.run(ctx);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor g = p.output(grads[i]), r = p.output(reduced[i]);
    for (int64_t k = 0; k < g.numel(); ++k)
      ASSERT_EQ(r.data<float>()[k], g.data<float>()[k] * 0.25f) << m.names[i] << " element " << k;
  }
}

TEST(Bucket, AViewOutsideItsValueOrUnalignedIsRejected) {
  Graph g;
  const int x = g.input("x", {40});
  Attrs at;
  at.shape = Shape{8};
  at.begin = 36;
  EXPECT_THROW(g.add(Op::View, {x}, at, "past the end"), InvalidArgument);
  at.begin = 4;
  EXPECT_THROW(g.add(Op::View, {x}, at, "unaligned"), InvalidArgument);
  at.begin = 16;
  EXPECT_NO_THROW(g.add(Op::View, {x}, at, "fine"));
}

}  // namespace
}  // namespace tk::graph
