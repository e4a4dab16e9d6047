// The CUDA backend's host side, checked on every build without a GPU (issue 13): the row-major -> column-major
// GEMM mapping against a column-major reference GEMM, the launch geometry, and which ops have CUDA kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/cudnn_mapping.h"
#include "backends/cuda/gemm_cublaslt.h"
#include "backends/cuda/gemm_mapping.h"
#include "backends/cuda/launch_geometry.h"
#include "graph/kernel.h"
#include "graph/schedule.h"
#include "nn/compiler/programs.h"
#include "trainkit/trainkit.h"

namespace tk::cuda {
namespace {

// BLAS' column-major GEMM, as cuBLAS defines it: D(m x n) = op(A) op(B), element (i, j) at i + j * ld.
void column_major_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                       int64_t ldb, float* d, int64_t ldd) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = ta ? a[p + i * lda] : a[i + p * lda];
        const float bv = tb ? b[j + p * ldb] : b[p + j * ldb];
        s += double(av) * bv;
      }
      d[i + j * ldd] = static_cast<float>(s);
    }
}

TEST(CudaGemmMapping, RowMajorProductEqualsTheMappedColumnMajorOneForEveryTranspose) {
  const int64_t m = 5, n = 7, k = 3;  // all different, so a swapped dimension or stride shows
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // Row-major storage: A is m x k (k x m when ta), B is k x n (n x k when tb).
      std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(int(i * 7 % 11) - 5);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(int(i * 5 % 13) - 6);
      auto A = [&](int64_t i, int64_t p) {
        return ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
      };
      auto B = [&](int64_t p, int64_t j) {
        return tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
      };
      std::vector<float> want(static_cast<size_t>(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) s += double(A(i, p)) * B(p, j);
          want[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
        }
      const ColumnMajorGemm g = to_column_major(m, n, k, ta, tb);
      EXPECT_EQ(g.m, n);  // a bias epilogue adds g.m values: one per output feature
      EXPECT_EQ(g.n, m);
      std::vector<float> got(static_cast<size_t>(m * n), -99.0f);
      // A' is trainkit's B buffer, B' is trainkit's A buffer; D' is C read column-major.
      column_major_gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, b.data(), g.lda, a.data(), g.ldb, got.data(), g.ldc);
      EXPECT_EQ(got, want) << "ta " << ta << " tb " << tb;
    }
}

// Op determinism's GEMM algorithm: the first ranked result that does not split k (SPLITK_NUM 1); unreadable
// attributes (-1) and split ones are passed over; -1 when none is left (the caller takes cuBLASLt's first).
TEST(CudaGemmDeterminism, TheFirstUnsplitAlgorithmIsTaken) {
  EXPECT_EQ(first_unsplit_algorithm({1, 4, 1}), 0);
  EXPECT_EQ(first_unsplit_algorithm({4, 2, 1, 1}), 2);
  EXPECT_EQ(first_unsplit_algorithm({-1, 1}), 1) << "an attribute that could not be read is not trusted";
  EXPECT_EQ(first_unsplit_algorithm({8, 16, 2, 4, 3, 5, 6, 7}), -1);
  EXPECT_EQ(first_unsplit_algorithm({}), -1);
}

TEST(CudaLaunchGeometry, CoversTheWorkFillsTheDeviceAndLaunchesNothingForNothing) {
  EXPECT_EQ(elementwise_geometry(0, 132).blocks, 0u);
  EXPECT_EQ(elementwise_geometry(-5, 132).blocks, 0u);
  EXPECT_EQ(elementwise_geometry(1, 132).blocks, 1u);
  EXPECT_EQ(elementwise_geometry(256, 132).blocks, 1u);
  EXPECT_EQ(elementwise_geometry(257, 132).blocks, 2u);
  EXPECT_EQ(elementwise_geometry(257, 132).threads, kThreadsPerBlock);
  // Large work: capped at kBlocksPerSm per SM (the grid-stride loop covers the rest), per the device's SM count.
  EXPECT_EQ(elementwise_geometry(int64_t{1} << 30, 132).blocks, 132u * kBlocksPerSm);
  EXPECT_EQ(elementwise_geometry(int64_t{1} << 30, 108).blocks, 108u * kBlocksPerSm);
  EXPECT_EQ(elementwise_geometry(int64_t{1} << 30, 0).blocks, 132u * kBlocksPerSm);  // unknown: H100-class
}

// Every op with a float32 CPU kernel has a CUDA kernel or a declared reason not to (backends/cuda/coverage.cpp),
// and no op is both. Prints what the default MLP still lacks.
// Mixed precision's GEMMs run on cuBLASLt in 16 bits, not widened to float32 (gemm_cublaslt.cpp): the 16-bit
// MatMul and FusedMatMul signatures, and the bfloat16 product written in float32, are the native kernel's.
TEST(CudaLaunchGeometry, ReductionGroupsFollowTheReducedLength) {
  EXPECT_EQ(reduce_group_threads(1000, 31, true, 132), 1);             // short rows: a thread per output
  EXPECT_EQ(reduce_group_threads(1000, 32, true, 132), kWarpThreads);  // a warp per row
  EXPECT_EQ(reduce_group_threads(4096, 1023, true, 132), kWarpThreads);
  EXPECT_EQ(reduce_group_threads(4096, 1024, true, 132), int(kThreadsPerBlock));  // a block per row
  EXPECT_EQ(reduce_group_threads(3, 5000, false, 132), int(kThreadsPerBlock));    // few strided outputs: cooperate
  // many strided outputs (a column sum of a wide matrix): coalesced across outputs, enough to fill the device
  EXPECT_EQ(reduce_group_threads(int64_t{1} << 20, 5000, false, 132), 1);
  EXPECT_EQ(group_geometry(0, 32, 132).blocks, 0u);
  EXPECT_EQ(group_geometry(9, 32, 132).blocks, 2u);  // 8 warps per block
  EXPECT_EQ(group_geometry(9, 256, 132).blocks, 9u);
  EXPECT_EQ(group_geometry(int64_t{1} << 30, 256, 132).blocks, 132u * kBlocksPerSm);
}

TEST(CudaCoverage, SixteenBitGemmsRunOnCublasLtInTheirOwnDtypes) {
  graph::ensure_backends_registered();
  if (graph::kernel_signatures(DeviceKind::cuda, graph::Op::Relu).empty())
    GTEST_SKIP() << "this build has no CUDA kernels (TK_CUDA=OFF or no CUDA toolkit)";
  for (graph::Op op : {graph::Op::MatMul, graph::Op::FusedMatMul})
    for (DType t : {DType::f16, DType::bf16})
      EXPECT_TRUE(gemm16_is_native(graph::find_kernel(DeviceKind::cuda, op, graph::signature_for(op, t))))
          << graph::op_name(op) << " " << dtype_name(t);
  EXPECT_TRUE(gemm16_is_native(graph::find_kernel(DeviceKind::cuda, graph::Op::MatMul,
                                                  graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32))));
  EXPECT_FALSE(gemm16_is_native(
      graph::find_kernel(DeviceKind::cuda, graph::Op::MatMul, graph::signature_for(graph::Op::MatMul, DType::f32))));
}

// The 16-bit convolutions run on cuDNN in their own dtypes (conv_native16.cpp), over the widened kernels they fall
// back to: every 16-bit Conv2D, FusedConv2D, Conv2DGradInput and Conv2DGradFilter signature is the native kernel's.
TEST(CudaCoverage, SixteenBitConvolutionsRunOnCudnnInTheirOwnDtypes) {
  graph::ensure_backends_registered();
  if (graph::kernel_signatures(DeviceKind::cuda, graph::Op::Relu).empty())
    GTEST_SKIP() << "this build has no CUDA kernels (TK_CUDA=OFF or no CUDA toolkit)";
  for (graph::Op op :
       {graph::Op::Conv2D, graph::Op::FusedConv2D, graph::Op::Conv2DGradInput, graph::Op::Conv2DGradFilter}) {
    for (DType t : {DType::f16, DType::bf16})
      EXPECT_TRUE(conv16_is_native(graph::find_kernel(DeviceKind::cuda, op, graph::signature_for(op, t))))
          << graph::op_name(op) << " " << dtype_name(t);
    EXPECT_FALSE(conv16_is_native(graph::find_kernel(DeviceKind::cuda, op, graph::signature_for(op, DType::f32))));
  }
}

// The tutorial CNN's training step under each mixed policy, traced as fit runs it: what dtypes each convolution node
// has (every input and the output in the policy's 16-bit dtype, the filter gradient included: its cast to float32 is
// not folded into the convolution), so each takes the native kernel; and the planned workspace (the widened rule)
// leaves cuDNN at least what the float32 convolution of the same node gets, so the native path fits the plan.
TEST(CudaCoverage, TheMixedCnnStepsConvolutionsAreNativeAndFitTheirPlannedWorkspace) {
  graph::ensure_backends_registered();
  if (graph::kernel_signatures(DeviceKind::cuda, graph::Op::Relu).empty())
    GTEST_SKIP() << "this build has no CUDA kernels (TK_CUDA=OFF or no CUDA toolkit)";
  const auto is_conv = [](graph::Op op) {
    return op == graph::Op::Conv2D || op == graph::Op::FusedConv2D || op == graph::Op::Conv2DGradInput ||
           op == graph::Op::Conv2DGradFilter;
  };
  // Per convolution node, in the step's order (the same graph under every policy): its op, its planned bytes on
  // CUDA and its filter's elements.
  struct ConvPlan {
    graph::Op op;
    size_t planned;
    int64_t filter;
  };
  const auto conv_plans = [&](const std::string& policy, std::vector<ConvPlan>* plans,
                              std::vector<std::string>* lines) {
    const std::unique_ptr<Model> cnn = models::tutorial_cnn();
    cnn->set_dtype_policy(policy);
    cnn->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    const nn::ProgramCache::Traced t = cnn->trainer().programs().trace(nn::ProgramKind::train, 32, false);
    std::vector<int> roots = t.keep;
    roots.insert(roots.end(), t.sinks.begin(), t.sinks.end());
    for (int id : graph::schedule(t.g, roots)) {
      const graph::Node& n = t.g[id];
      if (!is_conv(n.op)) continue;
      std::vector<DType> ins;
      for (int i : n.inputs) ins.push_back(t.g[i].dtype);
      const graph::KernelSignature sig = graph::signature_of(t.g, id);
      if (lines) {
        lines->push_back(std::string(graph::op_name(n.op)) + " " + sig.to_string() + " (" + n.name + ")");
        EXPECT_EQ(native16_conv_unsupported(ins, n.dtype, true), "") << lines->back();
        EXPECT_TRUE(conv16_is_native(graph::find_kernel(DeviceKind::cuda, n.op, sig))) << lines->back();
      }
      const graph::WorkspaceFn rule = graph::registered_workspace(DeviceKind::cuda, n.op);
      ASSERT_NE(rule, nullptr);
      const graph::Node& w = t.g[n.op == graph::Op::Conv2DGradFilter ? id : n.inputs[1]];
      plans->push_back({n.op, rule(t.g, id), w.shape.numel()});
    }
  };
  std::vector<ConvPlan> f32;
  conv_plans("float32", &f32, nullptr);
  ASSERT_EQ(f32.size(), 5u) << "two forward convolutions, the second one's input gradient, two filter gradients";
  for (const std::string policy : {"mixed_bfloat16", "mixed_float16"}) {
    SCOPED_TRACE(policy);
    std::vector<ConvPlan> mixed;
    std::vector<std::string> lines;
    conv_plans(policy, &mixed, &lines);
    for (const std::string& l : lines) std::printf("[ %s ] %s\n", policy.c_str(), l.c_str());
    ASSERT_EQ(mixed.size(), f32.size());
    for (size_t i = 0; i < mixed.size(); ++i) {
      SCOPED_TRACE(lines[i]);
      ASSERT_EQ(mixed[i].op, f32[i].op);
      const CudnnWorkspace native = cudnn_workspace(mixed[i].planned, mixed[i].filter, 2),
                           single = cudnn_workspace(f32[i].planned, f32[i].filter, 4);
      ASSERT_TRUE(single.fits);
      ASSERT_TRUE(native.fits);
      EXPECT_GE(native.cudnn_bytes, single.cudnn_bytes);
    }
  }
}

TEST(CudaCoverage, EveryOpHasACudaKernelOrADeclaredExclusion) {
  graph::ensure_backends_registered();
  if (graph::kernel_signatures(DeviceKind::cuda, graph::Op::Relu).empty())
    GTEST_SKIP() << "this build has no CUDA kernels (TK_CUDA=OFF or no CUDA toolkit)";
  std::vector<graph::Op> excluded;
  for (const Excluded& e : excluded_ops()) excluded.push_back(e.op);
  int with_kernel = 0, without = 0;
  for (int i = 0; i < graph::kOpCount; ++i) {
    const auto op = static_cast<graph::Op>(i);
    if (!graph::has_kernel(DeviceKind::cpu, op, graph::signature_for(op, DType::f32))) continue;
    const bool cuda = graph::has_kernel(DeviceKind::cuda, op, graph::signature_for(op, DType::f32));
    const bool listed = std::find(excluded.begin(), excluded.end(), op) != excluded.end();
    EXPECT_TRUE(cuda || listed) << graph::op_name(op) << ": no CUDA kernel and not in the exclusion list";
    EXPECT_FALSE(cuda && listed) << graph::op_name(op) << ": has a CUDA kernel, remove it from the exclusion list";
    (cuda ? with_kernel : without) += 1;
  }
  std::printf("CUDA kernels for %d of %d ops with a float32 CPU kernel; %d excluded (not written yet)\n", with_kernel,
              with_kernel + without, without);
  EXPECT_GT(with_kernel, 0);
}

// The ops of a model's real training step (the fused graph fit runs) that have no CUDA kernel for their dtypes.
std::vector<std::string> missing_on_cuda(Model& m) {
  m.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  const nn::ProgramCache::Traced t = m.trainer().programs().trace(nn::ProgramKind::train, 32, false);
  std::vector<int> roots = t.keep;
  roots.insert(roots.end(), t.sinks.begin(), t.sinks.end());
  std::vector<std::string> missing;
  for (int id : graph::schedule(t.g, roots)) {
    const graph::Node& n = t.g[id];
    if (n.op == graph::Op::Input || n.op == graph::Op::Variable || n.op == graph::Op::View) continue;  // storage
    const graph::KernelSignature sig = graph::signature_of(t.g, id);
    if (!graph::has_kernel(DeviceKind::cuda, n.op, sig))
      missing.push_back(std::string(graph::op_name(n.op)) + " " + sig.to_string() + " (" + n.name + ")");
  }
  return missing;
}

// The bar: the training steps of the default MLP and of the tutorial CNN (float32, Adam, accuracy) have a
// CUDA kernel for every op.
TEST(CudaCoverage, TheMlpAndCnnTrainingStepsHaveACudaKernelForEveryOp) {
  graph::ensure_backends_registered();
  if (graph::kernel_signatures(DeviceKind::cuda, graph::Op::Relu).empty())
    GTEST_SKIP() << "this build has no CUDA kernels (TK_CUDA=OFF or no CUDA toolkit)";
  Sequential mlp({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  const std::vector<std::string> mlp_missing = missing_on_cuda(mlp);
  for (const std::string& m : mlp_missing) ADD_FAILURE() << "the MLP needs " << m;
  const std::unique_ptr<Model> cnn = models::tutorial_cnn();
  for (const std::string& m : missing_on_cuda(*cnn)) ADD_FAILURE() << "the tutorial CNN needs " << m;
}

}  // namespace
}  // namespace tk::cuda
