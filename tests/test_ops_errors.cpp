// What the op harness expects when something is missing or wrong: a missing kernel is an Unsupported
// error naming op, dtypes and device (never a fallback); mixing dtypes is an InvalidArgument from the
// dtype rule; shape errors name op and shapes. And dropout masks depend only on seed and step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "op_harness.h"

namespace tk::graph::harness {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A device kind this build has no backend for (find_kernel must still answer, naming it), if any.
TEST(KernelErrors, NoBackendForTheDeviceNamesOpDTypesAndDevice) {
  int kinds = 0;
  for (int k = 0; k < kDeviceKindCount; ++k) {
    const auto kind = static_cast<DeviceKind>(k);
    if (has_backend(kind)) continue;
    ++kinds;
    const std::string dev = Device{kind, 0}.to_string();
    // Conv2D: a kind without a backend may still have some kernels in the table (cuda's first ones, issue 13).
    try {
      find_kernel(kind, Op::Conv2D, signature_for(Op::Conv2D, DType::f32));
      ADD_FAILURE() << "expected Unsupported for " << dev;
    } catch (const Unsupported& e) {
      const std::string m = e.what();
      EXPECT_TRUE(contains(m, "Conv2D")) << m;
      EXPECT_TRUE(contains(m, "(float32, float32) -> float32")) << m;
      EXPECT_TRUE(contains(m, dev)) << m;
    }
    Tensor a = Tensor::zeros({2, 2});
    Graph g;
    const int v = g.variable("a", a);
    const int y = g.add(Op::MatMul, {v, v});
    try {
      Program p(std::move(g), {y}, {}, Device{kind, 0});
      ADD_FAILURE() << "a program for " << dev << " without a backend";
    } catch (const Unsupported& e) {
      EXPECT_TRUE(contains(e.what(), dev.substr(0, dev.find(':')))) << e.what();
    }
  }
  if (kinds == 0) GTEST_SKIP() << "every device kind has a backend in this build";
}

TEST(KernelErrors, MissingSignatureNamesOpDTypesDeviceAndWhatExists) {
  const KernelSignature mixed({DType::f16, DType::f32}, DType::f16);
  ASSERT_FALSE(has_kernel(DeviceKind::cpu, Op::MatMul, mixed));
  try {
    find_kernel(DeviceKind::cpu, Op::MatMul, mixed);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "MatMul")) << m;
    EXPECT_TRUE(contains(m, "(float16, float32) -> float16")) << m;
    EXPECT_TRUE(contains(m, "cpu:0")) << m;
    EXPECT_TRUE(contains(m, "(float32, float32) -> float32")) << m << " (should list the signatures that exist)";
  }
}

// A program that needs a kernel the device lacks fails when it is built, naming op, dtype and device.
TEST(KernelErrors, ProgramWithoutAKernelIsUnsupportedWhenBuilt) {
  const Op op = Op::SgdUpdate;
  if (has_kernel(DeviceKind::cpu, op, signature_for(op, DType::f16)))
    GTEST_SKIP() << "the cpu has a float16 SgdUpdate now; pick another missing kernel";
  UpdateConfig cfg;
  Tensor w = Tensor::zeros({4}).to(DType::f16), grad = w.clone();  // no momentum: no slot
  Graph g;
  Attrs at;
  at.update = &cfg;
  const int upd = g.add(op, {g.variable("w", w), g.variable("g", grad)}, at, "dense/kernel/sgd");
  try {
    Program p(std::move(g), {}, {upd}, Device::cpu());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "SgdUpdate")) << msg;
    EXPECT_TRUE(contains(msg, "float16")) << msg;
    EXPECT_TRUE(contains(msg, "cpu:0")) << msg;
  }
}

// Ops never mix dtypes: the dtype rule rejects the node (so no program can even ask for such a kernel).
TEST(KernelErrors, GraphRejectsMixedDTypesNamingOpAndDTypes) {
  Tensor a = Tensor::zeros({2, 3}).to(DType::f16), b = Tensor::zeros({3, 2});
  Graph g;
  const int va = g.variable("a", a), vb = g.variable("b", b);
  const int before = g.size();
  try {
    g.add(Op::MatMul, {va, vb}, {}, "dense/matmul");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "MatMul")) << m;
    EXPECT_TRUE(contains(m, "dense/matmul")) << m;
    EXPECT_TRUE(contains(m, "float16, float32")) << m;
    EXPECT_TRUE(contains(m, "Cast")) << m << " (should say what to do)";
  }
  EXPECT_EQ(g.size(), before) << "a rejected add must not leave a node behind";
  EXPECT_NO_THROW(g.add(Op::MatMul, {g.cast(va, DType::f32), vb}));
}

TEST(KernelErrors, EveryOpButTheSourcesHasACpuFloat32Kernel) {
  for (int i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    if (op == Op::Input || op == Op::Variable || op == Op::View) continue;  // View: memory inside another value
    EXPECT_TRUE(has_kernel(DeviceKind::cpu, op, signature_for(op, DType::f32))) << op_name(op);
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

// Per target: the rate holds, the mask depends only on (seed, step), and its values are 0 or 1/(1-rate)
// (rounded to the dtype).
TEST(OpDropout, MaskKeepsTheRateAndDependsOnlyOnSeedAndStep) {
  for (const Target& t : targets()) {
    Graph g;
    Attrs at;
    at.rate = 0.3f;
    at.seed = 99;
    at.shape = Shape{200, 500};
    at.dtype = t.dtype;
    const int m = g.add(Op::DropoutMask, {}, at);
    if (!has_kernel(t.kind, Op::DropoutMask, signature_of(g, m))) continue;  // the coverage test fails for it
    Program p(std::move(g), {m}, {}, t.device());
    ExecContext ctx;
    ctx.device = t.device();
    ctx.scalars.step = 5;
    p.run(ctx);
    const Tensor first = host_f32(p.output(m));
    const float keep =
        t.dtype == DType::f32 ? 1.0f / 0.7f : host_f32(Tensor::full({1}, 1.0f / 0.7f).to(t.dtype)).data<float>()[0];
    int64_t zeros = 0, wrong = 0;
    for (int64_t i = 0; i < first.numel(); ++i) {
      const float v = first.data<float>()[i];
      if (v == 0.0f)
        ++zeros;
      else if (v != keep)
        ++wrong;
    }
    EXPECT_EQ(wrong, 0) << t.name();
    EXPECT_NEAR(double(zeros) / 100000.0, 0.3, 0.01) << t.name();
    p.run(ctx);
    const Tensor again = host_f32(p.output(m));
    EXPECT_EQ(std::memcmp(first.raw(), again.raw(), first.nbytes()), 0)
        << t.name() << ": same seed and step, same mask";
    ctx.scalars.step = 6;
    p.run(ctx);
    const Tensor next = host_f32(p.output(m));
    EXPECT_NE(std::memcmp(first.raw(), next.raw(), first.nbytes()), 0) << t.name() << ": a new step, a new mask";
  }
}

}  // namespace
}  // namespace tk::graph::harness
