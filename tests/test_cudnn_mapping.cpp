// The cuDNN path's host logic, without a GPU (src/backends/cuda/cudnn_mapping.h, cudnn_loader.h): which convolutions
// take cuDNN, the descriptors' numbers and types (float32, float16, bfloat16), the workspace split, the algorithm
// choice over fake heuristic lists, which 16-bit convolutions run natively, the version rule, the loader's
// not-available states, and the op-determinism switch.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cudnn_loader.h"
#include "backends/cuda/cudnn_mapping.h"
#include "graph/window.h"
#include "trainkit/runtime/determinism.h"

namespace tk::cuda {
namespace {

// x (N, H, W, C), a kh x kw kernel, strides and dilations {h, w}, pad {top, bottom, left, right}.
graph::Window window(Shape x, int64_t kh, int64_t kw, std::array<int64_t, 2> s, std::array<int64_t, 2> d,
                     std::array<int64_t, 4> pad) {
  graph::Attrs a;
  a.kernel[0] = kh;
  a.kernel[1] = kw;
  a.stride[0] = s[0];
  a.stride[1] = s[1];
  a.dilation[0] = d[0];
  a.dilation[1] = d[1];
  for (int i = 0; i < 4; ++i) a.pad[i] = pad[static_cast<size_t>(i)];
  return graph::Window::of(x, a);
}
// The same stride and dilation on both axes.
graph::Window window(Shape x, int64_t kh, int64_t kw, int64_t s, int64_t d, std::array<int64_t, 4> pad) {
  return window(std::move(x), kh, kw, {s, s}, {d, d}, pad);
}
// Keras "same" padding for a square kernel and stride on a square image: {top, bottom, left, right}.
std::array<int64_t, 4> same(int64_t in, int64_t k, int64_t s) {
  const auto [before, after] = graph::same_padding(in, k, s, 1);
  return {before, after, before, after};
}

TEST(CudnnMapping, NhwcDescriptorsHaveChannelsInnermost) {
  const CudnnTensor4d d = nhwc_descriptor(8, 3, 5, 7);
  EXPECT_EQ(d.n, 8);
  EXPECT_EQ(d.c, 3);
  EXPECT_EQ(d.h, 5);
  EXPECT_EQ(d.w, 7);
  EXPECT_EQ(d.c_stride, 1);
  EXPECT_EQ(d.w_stride, 3);
  EXPECT_EQ(d.h_stride, 7 * 3);
  EXPECT_EQ(d.n_stride, 5 * 7 * 3);
}

// A depthwise convolution (MobileNetV2's 3x3, 96 channels, depth_multiplier 1): groups = C, the filter descriptor
// holds one channel per group (trainkit's (KH, KW, 1, F) kernel as KRSC), x and y keep every channel.
TEST(CudnnMapping, DepthwiseConvolutionMapsOntoCudnnGroups) {
  const graph::Window g = window({64, 16, 16, 96}, 3, 3, 1, 1, same(16, 3, 1));
  ASSERT_EQ(cudnn_unsupported(g, 96), "");
  const CudnnConvDims d = cudnn_dims(g, 96, 96);
  EXPECT_EQ(d.groups, 96);
  EXPECT_EQ(d.k, 96);
  EXPECT_EQ(d.c, 1);
  EXPECT_EQ(d.filter_elements(), 3 * 3 * 1 * 96);
  EXPECT_EQ(d.x.c, 96);
  EXPECT_EQ(d.y.c, 96);
  EXPECT_EQ(cudnn_dims(g, 96).groups, 1);  // ungrouped by default
  EXPECT_EQ(cudnn_dims(g, 96).c, 96);
}

// The tutorial CNN's first convolution: 28x28x1, 5x5 "same" (2 on every side), 32 filters, batch 128.
TEST(CudnnMapping, TheTutorialConvolutionMapsOntoCudnn) {
  const graph::Window g = window({128, 28, 28, 1}, 5, 5, 1, 1, same(28, 5, 1));
  ASSERT_EQ(cudnn_unsupported(g, 32), "");
  const CudnnConvDims d = cudnn_dims(g, 32);
  EXPECT_EQ(d.pad_h, 2);
  EXPECT_EQ(d.pad_w, 2);
  EXPECT_EQ(d.stride_h, 1);
  EXPECT_EQ(d.dilation_w, 1);
  EXPECT_EQ(d.k, 32);  // the filter as KRSC: (F, KH, KW, C)
  EXPECT_EQ(d.c, 1);
  EXPECT_EQ(d.r, 5);
  EXPECT_EQ(d.s, 5);
  EXPECT_EQ(d.filter_elements(), 5 * 5 * 1 * 32);
  EXPECT_EQ(d.x.n, 128);
  EXPECT_EQ(d.y.c, 32);  // y (N, OH, OW, F) in NHWC: F is the descriptor's C
  EXPECT_EQ(d.y.h, 28);
  EXPECT_EQ(d.y.w, 28);
  EXPECT_EQ(d.y.c_stride, 1);
  EXPECT_EQ(d.y.w_stride, 32);
}

TEST(CudnnMapping, StridesDilationAndUnequalSidesAreMapped) {
  const graph::Window g = window({2, 9, 11, 4}, 3, 2, 2, 3, {3, 3, 1, 1});
  ASSERT_EQ(cudnn_unsupported(g, 6), "");
  const CudnnConvDims d = cudnn_dims(g, 6);
  EXPECT_EQ(d.pad_h, 3);
  EXPECT_EQ(d.pad_w, 1);
  EXPECT_EQ(d.stride_h, 2);
  EXPECT_EQ(d.stride_w, 2);
  EXPECT_EQ(d.dilation_h, 3);
  EXPECT_EQ(d.dilation_w, 3);
  EXPECT_EQ(d.r, 3);
  EXPECT_EQ(d.s, 2);
  EXPECT_EQ(d.y.h, g.oh);  // graph::Window's output size (cuDNN's is checked against it on the GPU)
  EXPECT_EQ(d.y.w, g.ow);
}

// Every number different between the axes: a swapped h and w (in the dims, strides, dilations, pads or filter)
// fails here. x (2, 8, 7, 3), w (3, 2, 3, 4), stride (2, 1), dilation (1, 2), padding 1 on every side.
TEST(CudnnMapping, DifferentStridesAndDilationsPerAxisKeepTheirAxes) {
  const graph::Window g = window({2, 8, 7, 3}, 3, 2, {2, 1}, {1, 2}, {1, 1, 1, 1});
  ASSERT_EQ(g.oh, 4);  // (8 + 2 - 3) / 2 + 1
  ASSERT_EQ(g.ow, 7);  // (7 + 2 - 3) / 1 + 1, the kernel's 2 taps dilated by 2
  ASSERT_EQ(cudnn_unsupported(g, 4), "");
  const CudnnConvDims d = cudnn_dims(g, 4);
  EXPECT_EQ(d.stride_h, 2);
  EXPECT_EQ(d.stride_w, 1);
  EXPECT_EQ(d.dilation_h, 1);
  EXPECT_EQ(d.dilation_w, 2);
  EXPECT_EQ(d.pad_h, 1);
  EXPECT_EQ(d.pad_w, 1);
  EXPECT_EQ(d.r, 3);  // KH
  EXPECT_EQ(d.s, 2);  // KW
  EXPECT_EQ(d.c, 3);
  EXPECT_EQ(d.k, 4);
  EXPECT_EQ(d.x.h, 8);
  EXPECT_EQ(d.x.w, 7);
  EXPECT_EQ(d.x.h_stride, 7 * 3);
  EXPECT_EQ(d.y.h, 4);
  EXPECT_EQ(d.y.w, 7);
  EXPECT_EQ(d.y.h_stride, 7 * 4);
  EXPECT_EQ(d.y.n_stride, 4 * 7 * 4);
}

// TensorFlow's "same" with stride 2 on an even input pads 0 before and 1 after: cuDNN cannot, im2col runs it.
TEST(CudnnMapping, AsymmetricPaddingStaysOnIm2col) {
  const std::array<int64_t, 4> pad = same(28, 3, 2);
  ASSERT_EQ(pad[0], 0);
  ASSERT_EQ(pad[1], 1);
  const std::string why = cudnn_unsupported(window({4, 28, 28, 8}, 3, 3, 2, 1, pad), 16);
  EXPECT_NE(why.find("asymmetric padding (top 0, bottom 1, left 0, right 1)"), std::string::npos) << why;
  // Only one axis uneven is enough to stay on im2col; "valid" and odd "same" are symmetric.
  EXPECT_NE(cudnn_unsupported(window({1, 5, 6, 2}, 3, 2, 1, 1, {1, 1, 0, 1}), 3), "");
  EXPECT_EQ(cudnn_unsupported(window({1, 5, 6, 2}, 3, 3, 1, 1, {0, 0, 0, 0}), 3), "");
  EXPECT_EQ(cudnn_unsupported(window({1, 28, 28, 2}, 3, 3, 1, 1, same(28, 3, 1)), 3), "");
}

TEST(CudnnMapping, EmptyAndHugeConvolutionsStayOnIm2col) {
  EXPECT_NE(cudnn_unsupported(window({0, 5, 5, 2}, 3, 3, 1, 1, {0, 0, 0, 0}), 3).find("empty"), std::string::npos);
  EXPECT_NE(cudnn_unsupported(window({2, 5, 5, 2}, 3, 3, 1, 1, {0, 0, 0, 0}), 0).find("empty"), std::string::npos);
  EXPECT_NE(cudnn_unsupported(window({2, 2, 2, 2}, 3, 3, 1, 1, {0, 0, 0, 0}), 3).find("empty"), std::string::npos);
  // 2^31 input elements: cuDNN's int dimensions and strides cannot index them.
  EXPECT_NE(cudnn_unsupported(window({2048, 1024, 1024, 1}, 1, 1, 1, 1, {0, 0, 0, 0}), 1).find("2^31"),
            std::string::npos);
}

TEST(CudnnMapping, TheWorkspaceIsSplitUnderThePlannedBytes) {
  // [up to 192 bytes to reach 256-byte alignment | filter (rounded to 256) | cuDNN's workspace]
  const CudnnWorkspace w = cudnn_workspace(1000, 10);
  ASSERT_TRUE(w.fits);
  EXPECT_EQ(w.filter_bytes, 40u);
  EXPECT_EQ(w.cudnn_offset, 256u);
  EXPECT_EQ(w.cudnn_bytes, 1000u - 192u - 256u);
  EXPECT_LE(192 + w.cudnn_offset + w.cudnn_bytes, 1000u) << "never past the planned bytes, whatever the alignment";
  EXPECT_FALSE(cudnn_workspace(600, 100).fits);  // 192 + 512 > 600: the filter copy does not fit
  EXPECT_TRUE(cudnn_workspace(192 + 512, 100).fits);
  EXPECT_EQ(cudnn_workspace(192 + 512, 100).cudnn_bytes, 0u);
  EXPECT_FALSE(cudnn_workspace(100, 1).fits);
}

// float16 / bfloat16 convolutions: the filter copy takes 2 bytes an element, so the same planned bytes leave cuDNN
// more.
TEST(CudnnMapping, SixteenBitFiltersTakeHalfTheWorkspace) {
  const CudnnWorkspace w = cudnn_workspace(1000, 100, 2);
  ASSERT_TRUE(w.fits);
  EXPECT_EQ(w.filter_bytes, 200u);
  EXPECT_EQ(w.cudnn_offset, 256u);
  EXPECT_EQ(w.cudnn_bytes, 1000u - 192u - 256u);
  EXPECT_GT(w.cudnn_bytes, cudnn_workspace(1000, 100).cudnn_bytes) << "float32: 400 bytes of filter, 512 rounded";
  EXPECT_TRUE(cudnn_workspace(192 + 256, 128, 2).fits);
  EXPECT_FALSE(cudnn_workspace(192 + 256, 128, 4).fits);
}

// The descriptors' types: the data in the tensors' dtype, the compute always float (float32 accumulation, one
// rounding: cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), tensor cores for 16 bits only.
TEST(CudnnMapping, SixteenBitConvolutionsComputeInFloat32OnTensorCores) {
  const CudnnConvTypes f32 = cudnn_conv_types(DType::f32), f16 = cudnn_conv_types(DType::f16),
                       bf16 = cudnn_conv_types(DType::bf16);
  EXPECT_EQ(f32.data, CudnnType::float32);
  EXPECT_EQ(f16.data, CudnnType::float16);
  EXPECT_EQ(bf16.data, CudnnType::bfloat16);
  for (const CudnnConvTypes& t : {f32, f16, bf16}) EXPECT_EQ(t.compute, CudnnType::float32);
  EXPECT_EQ(f32.element_bytes, 4u);
  EXPECT_EQ(f16.element_bytes, 2u);
  EXPECT_EQ(bf16.element_bytes, 2u);
  EXPECT_FALSE(f32.tensor_math) << "float32 takes tensor cores (TF32) only with TK_ALLOW_TF32=1";
  EXPECT_TRUE(f16.tensor_math);
  EXPECT_TRUE(bf16.tensor_math);
}

// Which 16-bit convolution nodes run natively: one 16-bit dtype for every input and the output, and not switched off.
TEST(CudnnMapping, OnlyUniformSixteenBitConvolutionsRunNatively) {
  using V = std::vector<DType>;
  EXPECT_EQ(native16_conv_unsupported(V{DType::bf16, DType::bf16}, DType::bf16, true), "");
  EXPECT_EQ(native16_conv_unsupported(V{DType::f16, DType::f16, DType::f16}, DType::f16, true), "") << "with a bias";
  EXPECT_EQ(native16_conv_unsupported(V{DType::bf16, DType::bf16}, DType::bf16, false), "TK_CUDA_NATIVE16=0");
  // A bfloat16 filter gradient written in float32 (as a MatMul's is under mixed_bfloat16): cuDNN writes dw in x's
  // type, so it would be rounded to bfloat16 first; such a node stays widened (float32 product, no rounding).
  EXPECT_EQ(native16_conv_unsupported(V{DType::bf16, DType::bf16}, DType::f32, true),
            "a float32 output (cuDNN writes the inputs' 16-bit dtype)");
  EXPECT_EQ(native16_conv_unsupported(V{DType::f16, DType::f32}, DType::f16, true),
            "a float32 input with a float16 output (cuDNN takes one dtype for x, the filter and y)");
  EXPECT_NE(native16_conv_unsupported(V{DType::bf16, DType::f16}, DType::bf16, true), "");
}

AlgoCandidate candidate(int algo, size_t memory, bool deterministic = true, bool tensor_math = false, bool ok = true) {
  AlgoCandidate c;
  c.algo = algo;
  c.ok = ok;
  c.memory = memory;
  c.deterministic = deterministic;
  c.tensor_math = tensor_math;
  return c;
}

TEST(CudnnAlgorithm, TheFirstRankedThatFitsIsChosen) {
  const std::vector<AlgoCandidate> ranked = {candidate(6, 64 << 20), candidate(1, 8 << 20), candidate(0, 0)};
  EXPECT_EQ(choose_algorithm(ranked, 128 << 20, false, false), 0);
  EXPECT_EQ(choose_algorithm(ranked, 32 << 20, false, false), 1);
  EXPECT_EQ(choose_algorithm(ranked, 8 << 20, false, false), 1) << "a workspace exactly the limit fits";
  EXPECT_EQ(choose_algorithm(ranked, 1 << 20, false, false), 2);
  EXPECT_EQ(choose_algorithm({}, 1 << 20, false, false), -1);
}

TEST(CudnnAlgorithm, FailedNondeterministicAndTf32CandidatesAreSkipped) {
  const std::vector<AlgoCandidate> ranked = {
      candidate(7, 0, true, false, /*ok=*/false),   // not supported for this shape
      candidate(3, 0, /*deterministic=*/false),     // e.g. backward filter with atomics
      candidate(5, 0, true, /*tensor_math=*/true),  // TF32 tensor cores
      candidate(1, 0)};
  EXPECT_EQ(choose_algorithm(ranked, 0, false, false), 1);
  EXPECT_EQ(choose_algorithm(ranked, 0, true, false), 3) << "op determinism on";
  EXPECT_EQ(choose_algorithm(ranked, 0, true, true), 2) << "determinism on, TK_ALLOW_TF32=1";
  EXPECT_EQ(choose_algorithm(ranked, 0, false, true), 1);
}

// 16-bit convolutions allow tensor-core candidates (their products are exact, the sums float32); no convolution takes
// one that may convert its operands down to float16 (ALLOW_CONVERSION), whatever the switches say.
TEST(CudnnAlgorithm, TensorMathForSixteenBitsButNeverDownConversion) {
  AlgoCandidate converting = candidate(4, 0, true, /*tensor_math=*/true);
  converting.converts = true;
  const std::vector<AlgoCandidate> ranked = {converting, candidate(1, 0, true, /*tensor_math=*/true), candidate(0, 0)};
  EXPECT_EQ(choose_algorithm(ranked, 0, true, /*allow_tensor_math=*/true), 1);
  EXPECT_EQ(choose_algorithm(ranked, 0, true, false), 2);
  EXPECT_EQ(next_algorithm(ranked, 1, 0, true, true), 2);
  EXPECT_EQ(choose_algorithm({converting}, 0, false, true), -1);
  EXPECT_EQ(no_algorithm_reason({converting}, 0, false, true),
            "1 candidate: 1 converting operands to float16 (ALLOW_CONVERSION)");
}

TEST(CudnnAlgorithm, NoneFitsSaysWhy) {
  const std::vector<AlgoCandidate> ranked = {candidate(0, 0, true, false, false), candidate(1, 0, false),
                                             candidate(2, 0, true, true), candidate(3, 64 << 20),
                                             candidate(4, 80 << 20)};
  ASSERT_EQ(choose_algorithm(ranked, 32 << 20, true, false), -1);
  EXPECT_EQ(no_algorithm_reason(ranked, 32 << 20, true, false),
            "5 candidates: 1 not supported for this shape, 1 not deterministic (op determinism is on), 1 using TF32 "
            "(TK_ALLOW_TF32 is not 1), 2 needing more than 32.00 MiB of workspace");
  EXPECT_EQ(no_algorithm_reason({}, 0, false, false), "0 candidates");
}

// cuDNN refuses the chosen algorithm on its first call: the walk goes on down the ranked list with the same rules.
TEST(CudnnAlgorithm, ARefusedAlgorithmGivesWayToTheNextThatFits) {
  const std::vector<AlgoCandidate> ranked = {candidate(6, 0),        candidate(2, 64 << 20),
                                             candidate(3, 0, false), candidate(5, 0, true, true),
                                             candidate(1, 0),        candidate(0, 0)};
  const size_t limit = 32 << 20;
  int pick = choose_algorithm(ranked, limit, true, false);
  ASSERT_EQ(pick, 0);
  std::vector<int> walked;  // algorithms in the order a plan would try them, each refused in turn
  for (; pick >= 0; pick = next_algorithm(ranked, pick, limit, true, false)) walked.push_back(ranked[pick].algo);
  EXPECT_EQ(walked, (std::vector<int>{6, 1, 0})) << "too big, nondeterministic and TF32 ones are passed over";
  EXPECT_EQ(next_algorithm(ranked, 0, limit, false, true), 2) << "determinism off, TF32 allowed: algorithm 3";
  EXPECT_EQ(next_algorithm(ranked, 5, limit, true, false), -1) << "the last refused: im2col";
  EXPECT_EQ(next_algorithm(ranked, -1, limit, true, false), -1);
  EXPECT_EQ(next_algorithm({}, 0, limit, true, false), -1);
}

TEST(CudnnAlgorithm, OnlyBadParamAndNotSupportedMoveOn) {
  EXPECT_EQ(conv_call_outcome(0), ConvCallOutcome::ok);
  EXPECT_EQ(conv_call_outcome(2000), ConvCallOutcome::refused);  // CUDNN_STATUS_BAD_PARAM
  EXPECT_EQ(conv_call_outcome(2002), ConvCallOutcome::refused);  // BAD_PARAM_NULL_POINTER and the like
  EXPECT_EQ(conv_call_outcome(3000), ConvCallOutcome::refused);  // CUDNN_STATUS_NOT_SUPPORTED
  EXPECT_EQ(conv_call_outcome(3007), ConvCallOutcome::refused);  // NOT_SUPPORTED_* sub-codes
  EXPECT_EQ(conv_call_outcome(4000), ConvCallOutcome::failed);   // CUDNN_STATUS_INTERNAL_ERROR
  EXPECT_EQ(conv_call_outcome(5000), ConvCallOutcome::failed);   // CUDNN_STATUS_EXECUTION_FAILED
  EXPECT_EQ(conv_call_outcome(5003), ConvCallOutcome::failed);
  EXPECT_EQ(conv_call_outcome(1001), ConvCallOutcome::failed);  // NOT_INITIALIZED category
}

TEST(CudnnVersion, OnlyCudnn9IsUsed) {
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(90100), "9.1.0");
  EXPECT_EQ(cudnn_version_text(8907), "8.9.7");  // cuDNN 8 numbered major * 1000
  EXPECT_EQ(cudnn_version_problem(91900), "");
  EXPECT_EQ(cudnn_version_problem(90000), "");
  EXPECT_NE(cudnn_version_problem(8907).find("cuDNN 8.9.7 found, but this build needs cuDNN 9"), std::string::npos);
  EXPECT_NE(cudnn_version_problem(100200).find("cuDNN 10.2.0 found"), std::string::npos);
}

TEST(CudnnLoader, AMissingLibraryIsNotAvailableAndSaysWhy) {
  const CudnnLibrary lib({"/nonexistent/libcudnn.so.9"});
  EXPECT_FALSE(lib.available());
  EXPECT_EQ(lib.version(), 0u);
  if (cudnn_built()) {
    EXPECT_NE(lib.status().find("cuDNN not available: /nonexistent/libcudnn.so.9"), std::string::npos) << lib.status();
    EXPECT_NE(lib.status().find("LD_LIBRARY_PATH"), std::string::npos) << "it says what to do: " << lib.status();
  } else {
    EXPECT_NE(lib.status().find("cuDNN: "), std::string::npos) << lib.status();
  }
}

TEST(CudnnLoader, ALibraryThatIsNotCudnnIsRefused) {
  if (!cudnn_built()) GTEST_SKIP() << "this build has no cuDNN path (" << cudnn_summary() << ")";
  const CudnnLibrary lib({"libz.so.1"});  // opens, but has none of cuDNN's entry points
  EXPECT_FALSE(lib.available());
  EXPECT_NE(lib.status().find("libz.so.1 lacks cudnnGetVersion"), std::string::npos) << lib.status();
}

// The development machine has cuDNN 9 installed (no GPU): loading it and asking its version needs no device.
TEST(CudnnLoader, TheInstalledCudnnLoadsWhenPresent) {
  if (!cudnn_built()) GTEST_SKIP() << "this build has no cuDNN path (" << cudnn_summary() << ")";
  const CudnnLibrary lib({"libcudnn.so.9"});
  if (!lib.available()) GTEST_SKIP() << "no cuDNN 9 on this machine: " << lib.status();
  EXPECT_EQ(lib.version() / 10000, 9u);
  EXPECT_EQ(lib.status(), "cuDNN " + cudnn_version_text(lib.version()) + " from libcudnn.so.9");
}

// The folder the loader's search path finds libcudnn.so.9 in ("" when none).
std::string installed_cudnn_folder() {
  void* h = dlopen("libcudnn.so.9", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return "";
  char origin[PATH_MAX + 1] = {};
  const bool ok = dlinfo(h, RTLD_DI_ORIGIN, origin) == 0;
  dlclose(h);
  return ok ? std::string(origin) : "";
}

// cuDNN 9's front library alone (its sub-libraries not next to it): cudnnGetVersion() would abort the process
// ("Invalid handle. Cannot load symbol") or take another cuDNN's from the search path; the loader says why instead.
TEST(CudnnLoader, AFrontLibraryWithoutItsSubLibrariesIsNotAvailable) {
  if (!cudnn_built()) GTEST_SKIP() << "this build has no cuDNN path (" << cudnn_summary() << ")";
  const std::string folder = installed_cudnn_folder();
  if (folder.empty()) GTEST_SKIP() << "no libcudnn.so.9 on the loader's search path to copy";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tk_cudnn_front_only_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path front = dir / "libcudnn.so.9";
  std::filesystem::copy_file(folder + "/libcudnn.so.9", front, std::filesystem::copy_options::overwrite_existing);
  {
    const CudnnLibrary lib({front.string()});
    EXPECT_FALSE(lib.available());
    EXPECT_EQ(lib.version(), 0u);
    EXPECT_NE(lib.status().find("cuDNN not available: libcudnn_graph.so.9 next to " + front.string() + ": "),
              std::string::npos)
        << lib.status();
    EXPECT_NE(lib.status().find("sub-libraries"), std::string::npos) << "it says what to do: " << lib.status();
  }
  std::filesystem::remove_all(dir);
}

// A missing name is not the end: the next one is tried (a library that is not cuDNN, then a missing one, too).
TEST(CudnnLoader, TheNextNameIsTriedAfterOneThatFails) {
  if (!cudnn_built()) GTEST_SKIP() << "this build has no cuDNN path (" << cudnn_summary() << ")";
  const CudnnLibrary none({"libz.so.1", "/nonexistent/libcudnn.so.9"});
  EXPECT_FALSE(none.available());
  EXPECT_NE(none.status().find("libz.so.1 lacks cudnnGetVersion"), std::string::npos) << "the first one's reason";
  const CudnnLibrary lib({"libz.so.1", "/nonexistent/libcudnn.so.9", "libcudnn.so.9"});
  if (!CudnnLibrary({"libcudnn.so.9"}).available()) GTEST_SKIP() << "no cuDNN 9 on this machine";
  EXPECT_TRUE(lib.available()) << lib.status();
  EXPECT_EQ(lib.status(), "cuDNN " + cudnn_version_text(lib.version()) + " from libcudnn.so.9");
}

// A complete folder named by full path (as tools/gpu_check.sh's TK_CUDNN_LIBRARY names the wheel's) loads. Only its
// major version is checked: an earlier test in this process may have loaded another cuDNN's sub-libraries, which a
// second front library then finds by name (one cuDNN per process is the supported case).
TEST(CudnnLoader, AWholeFolderNamedByPathLoads) {
  if (!cudnn_built()) GTEST_SKIP() << "this build has no cuDNN path (" << cudnn_summary() << ")";
  const std::string folder = installed_cudnn_folder();
  if (folder.empty()) GTEST_SKIP() << "no libcudnn.so.9 on the loader's search path";
  const CudnnLibrary lib({folder + "/libcudnn.so.9"});
  ASSERT_TRUE(lib.available()) << lib.status();
  EXPECT_EQ(lib.version() / 10000, 9u);
  EXPECT_NE(lib.status().find(" from " + folder + "/libcudnn.so.9"), std::string::npos) << lib.status();
}

TEST(CudnnLoader, TheSwitchTurnsTheCudnnPathOffAndOn) {
  const bool before = cudnn_enabled();
  set_cudnn_enabled(false);
  EXPECT_FALSE(cudnn_enabled());
  set_cudnn_enabled(true);
  EXPECT_EQ(cudnn_enabled(), CudnnLibrary::instance().available());
  EXPECT_EQ(cudnn_enabled(), before);
  EXPECT_FALSE(cudnn_summary().empty());
}

TEST(OpDeterminism, EnableAndDisable) {
  const bool from_environment = [] {
    const char* v = std::getenv("TK_DETERMINISTIC");
    return v && (std::string(v) == "1" || std::string(v) == "true");
  }();
  config::enable_op_determinism();
  EXPECT_TRUE(config::is_op_determinism_enabled());
  config::disable_op_determinism();
  EXPECT_EQ(config::is_op_determinism_enabled(), from_environment);
}

}  // namespace
}  // namespace tk::cuda
