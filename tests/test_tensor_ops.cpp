// The general tensor ops' builder API (graph/tensor_ops.h) on values worked out by hand, and their bad-input errors:
// shapes that do not broadcast name the op, the owner and both shapes; an index outside a gather's table is an
// InvalidArgument naming its position, its value and the table size, raised before anything is read.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "graph/autodiff.h"
#include "graph/backend.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "runtime/cuda_device.h"

namespace tk::graph {
namespace {

Tensor iota(Shape s, float start = 0.0f, float step = 1.0f) {
  Tensor t(std::move(s), DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

Tensor run(Graph g, int out) {
  Program p(std::move(g), {out}, {}, Device::cpu());
  p.run(ExecContext{});
  return p.output(out);
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

TEST(TensorOps, SoftmaxOverTheFirstAxisSumsToOneDownEachColumn) {
  Graph g;
  Tensor x = iota({3, 4}, -1.0f, 0.37f);
  OpBuilder b{g, nullptr, "t"};
  const int y = ops::softmax(b, g.variable("x", x), 0);
  const Tensor out = run(std::move(g), y);
  ASSERT_EQ(out.shape(), (Shape{3, 4}));
  for (int c = 0; c < 4; ++c) {
    double sum = 0, denom = 0;
    for (int r = 0; r < 3; ++r) denom += std::exp(x.data<float>()[r * 4 + c]);
    for (int r = 0; r < 3; ++r) {
      const double want = std::exp(x.data<float>()[r * 4 + c]) / denom;
      EXPECT_NEAR(out.data<float>()[r * 4 + c], want, 1e-6);
      sum += out.data<float>()[r * 4 + c];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(TensorOps, LogSoftmaxIsStableForLargeLogits) {
  Graph g;
  Tensor x(Shape{1, 3}, DType::f32);
  x.data<float>()[0] = 1000.0f, x.data<float>()[1] = 0.0f, x.data<float>()[2] = -1000.0f;
  OpBuilder b{g, nullptr, "t"};
  const Tensor out = run(std::move(g), ops::log_softmax(b, g.variable("x", x), -1));
  EXPECT_EQ(out.data<float>()[0], 0.0f);
  EXPECT_EQ(out.data<float>()[1], -1000.0f);
  EXPECT_EQ(out.data<float>()[2], -2000.0f);
}

TEST(TensorOps, TileStackSplitAndVariance) {
  Graph g;
  Tensor x = iota({2, 3});
  OpBuilder b{g, nullptr, "t"};
  const int xv = g.variable("x", x);
  const int tiled = ops::tile(b, xv, {2, 1});
  const int stacked = ops::stack(b, {xv, xv}, 1);               // (2, 2, 3)
  const std::vector<int> parts = ops::split(b, xv, 1, {1, 2});  // (2, 1), (2, 2)
  const int var = ops::variance(b, xv, {1}, false);
  Program p(std::move(g), {tiled, stacked, parts[1], var}, {}, Device::cpu());
  p.run(ExecContext{});
  EXPECT_EQ(values(p.output(tiled)), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(p.output(stacked).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(p.output(stacked)), (std::vector<float>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(values(p.output(parts[1])), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_NEAR(p.output(var).data<float>()[0], 2.0f / 3.0f, 1e-7);  // biased: mean of (1, 0, 1)
}

TEST(TensorOps, MaxGradientIsSharedAmongTies) {
  Graph g;
  Tensor x(Shape{1, 4}, DType::f32);
  const float v[] = {1.0f, 3.0f, 3.0f, 2.0f};
  std::copy(v, v + 4, x.data<float>());
  OpBuilder b{g, nullptr, "t"};
  const int xv = g.variable("x", x);
  const int loss = ops::reduce(b, ReduceFn::sum, ops::reduce(b, ReduceFn::max, xv, {1}, false), {0}, false);
  const int dx = gradients(g, {loss}, {xv})[0];
  EXPECT_EQ(values(run(std::move(g), dx)), (std::vector<float>{0.0f, 0.5f, 0.5f, 0.0f}));
}

TEST(TensorOps, NanPropagatesThroughMaximumReductionsAndRelu) {
  Graph g;
  Tensor x(Shape{2, 2}, DType::f32);
  const float v[] = {NAN, 1.0f, -2.0f, 3.0f};
  std::copy(v, v + 4, x.data<float>());
  OpBuilder b{g, nullptr, "t"};
  const int xv = g.variable("x", x);
  const int mx = ops::reduce(b, ReduceFn::max, xv, {1}, false);
  const int relu = ops::unary(b, UnaryFn::relu, xv);
  const int maximum = ops::binary(b, BinaryFn::maximum, xv, ops::scalar(b, 0.0f, xv));
  Program p(std::move(g), {mx, relu, maximum}, {}, Device::cpu());
  p.run(ExecContext{});
  EXPECT_TRUE(std::isnan(p.output(mx).data<float>()[0]));
  EXPECT_EQ(p.output(mx).data<float>()[1], 3.0f);
  EXPECT_TRUE(std::isnan(p.output(relu).data<float>()[0]));
  EXPECT_EQ(p.output(relu).data<float>()[2], 0.0f);
  EXPECT_TRUE(std::isnan(p.output(maximum).data<float>()[0]));
}

TEST(TensorOpsErrors, ShapesThatDoNotBroadcastNameTheOpTheOwnerAndBothShapes) {
  Graph g;
  OpBuilder b{g, nullptr, "attention/scores"};
  const int a = g.placeholder_variable("a", Shape{2, 3});
  const int c = g.placeholder_variable("c", Shape{4});
  try {
    ops::binary(b, BinaryFn::add, a, c);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Binary"), std::string::npos) << m;
    EXPECT_NE(m.find("attention/scores"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(4,)"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::batch_matmul(b, a, g.placeholder_variable("w", Shape{4, 5})), InvalidArgument);
  EXPECT_THROW(ops::transpose(b, a, {0, 0}), InvalidArgument);
  EXPECT_THROW(ops::reduce(b, ReduceFn::sum, a, {2}, false), InvalidArgument);
}

TEST(TensorOpsErrors, AGatherIndexOutsideTheTableIsAnErrorNamingItNotARead) {
  Graph g;
  Tensor table = iota({5, 2});
  Tensor idx(Shape{3}, DType::i32);
  idx.data<int32_t>()[0] = 1, idx.data<int32_t>()[1] = 7, idx.data<int32_t>()[2] = 0;
  OpBuilder b{g, nullptr, "embedding"};
  const int y = ops::gather(b, g.variable("table", table), g.variable("ids", idx), 0);
  Program p(std::move(g), {y}, {}, Device::cpu());
  try {
    p.run(ExecContext{});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("embedding"), std::string::npos) << m;
    EXPECT_NE(m.find("index 7 at position 1"), std::string::npos) << m;
    EXPECT_NE(m.find("table of 5 rows"), std::string::npos) << m;
  }
  idx.data<int32_t>()[1] = -1;  // negative: the same error
  EXPECT_THROW(p.run(ExecContext{}), InvalidArgument);
}

// On CUDA a kernel cannot throw: a check kernel records the first bad index and the next synchronization (here, reading
// the output) throws the CPU kernel's error word for word (backends/device_errors.h; its host logic is tested on the
// CPU in tests/test_device_errors.cpp). Runs where a GPU is present.
TEST(TensorOpsErrors, AGatherIndexOutsideTheTableIsTheCpuErrorOnCudaToo) {
  if (!has_backend(DeviceKind::cuda) || runtime::cuda_devices().devices.empty()) GTEST_SKIP() << "no GPU here";
  auto error_on = [](Device d, int32_t bad) -> std::string {
    Graph g;
    Tensor idx(Shape{3}, DType::i32);
    idx.data<int32_t>()[0] = 1, idx.data<int32_t>()[1] = bad, idx.data<int32_t>()[2] = 0;
    Tensor table = d.kind == DeviceKind::cpu ? iota({5, 2}) : iota({5, 2}).to_device(d);
    Tensor ids = d.kind == DeviceKind::cpu ? idx : idx.to_device(d);
    OpBuilder b{g, nullptr, "embedding"};
    const int y = ops::gather(b, g.variable("table", table), g.variable("ids", ids), 0);
    Program p(std::move(g), {y}, {}, d);
    ExecContext ctx;
    ctx.device = d;
    try {
      p.run(ctx);
      (void)p.output(y).to_device(Device::cpu());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  const Device gpu{DeviceKind::cuda, 0};
  for (int32_t bad : {7, -1}) EXPECT_EQ(error_on(gpu, bad), error_on(Device::cpu(), bad)) << bad;
  EXPECT_EQ(error_on(gpu, 4), "no error") << "the record was cleared when it was reported";
}

TEST(TensorOps, GatherGradientSumsRepeatedIndicesInOrder) {
  Graph g;
  Tensor table = iota({4, 2});
  Tensor idx(Shape{5}, DType::i32);
  const int32_t ids[] = {2, 0, 2, 2, 3};
  std::copy(ids, ids + 5, idx.data<int32_t>());
  OpBuilder b{g, nullptr, "t"};
  const int tv = g.variable("table", table);
  const int y = ops::gather(b, tv, g.variable("ids", idx), 0);
  const int loss = ops::reduce(b, ReduceFn::sum, y, {0, 1}, false);
  const int d = gradients(g, {loss}, {tv})[0];
  EXPECT_EQ(values(run(std::move(g), d)), (std::vector<float>{1, 1, 0, 0, 3, 3, 1, 1}));
}

}  // namespace
}  // namespace tk::graph
