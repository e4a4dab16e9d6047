// NcclCollective (src/nn/distribute/nccl_collective.h) on the CUDA devices of this machine: every replica gets the
// same weighted sum. Skipped, saying why, without NCCL or without a device (it still links: CI proves that much).
#include <gtest/gtest.h>

#ifdef TK_HAVE_NCCL
#include <cuda_runtime.h>

#include <chrono>
#include <thread>
#include <vector>

#include "nn/distribute/nccl_collective.h"
#include "op_harness.h"

namespace tk::nn::distribute {
namespace {

TEST(NcclCollective, SumsWeightedGradientsIntoEveryDevice) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device here: NCCL is built and linked, but cannot run";
  }
  std::vector<int> devices;
  for (int d = 0; d < std::min(count, 2); ++d) devices.push_back(d);
  const auto group = NcclCollective::for_devices(devices, std::chrono::seconds(60));
  const int64_t n = 1000;
  const int replicas = static_cast<int>(devices.size());
  std::vector<std::vector<float>> got(devices.size(), std::vector<float>(n));
  std::vector<std::thread> threads;  // one thread per device: NCCL's collectives of one group run concurrently
  for (int r = 0; r < replicas; ++r)
    threads.emplace_back([&, r] {
      cudaSetDevice(devices[static_cast<size_t>(r)]);
      float *in = nullptr, *out = nullptr;
      cudaMalloc(&in, n * sizeof(float));
      cudaMalloc(&out, n * sizeof(float));
      std::vector<float> host(n, static_cast<float>(r + 1));
      cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      group->all_reduce(r, in, out, n, 0.5f, "test/all_reduce", 0);
      cudaMemcpy(got[static_cast<size_t>(r)].data(), out, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(in);
      cudaFree(out);
    });
  for (std::thread& t : threads) t.join();
  float want = 0;
  for (int r = 0; r < replicas; ++r) want += 0.5f * static_cast<float>(r + 1);
  for (int r = 0; r < replicas; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(i)], want) << r;
}

// Synchronized BatchNormalization's CUDA path (BnStats and BnInputGrad with a group: the packing kernels, NCCL's
// all-reduce weighted by a scalar read on the device, the global statistics and the input gradient from them) over
// one replica is the plain layer: forward and gradients against the cpu's plain kernels, in the op harness.
TEST(NcclCollective, SynchronizedBatchNormOnOneReplicaIsThePlainOne) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device here: the synchronized BatchNormalization kernels are built, but cannot run";
  }
  const auto group = NcclCollective::for_devices({0}, std::chrono::seconds(60));
  const graph::harness::Target cuda{DeviceKind::cuda, DType::f32};
  for (const char* label : {"BnApply through BnStats", "BnStats 300 rows"}) {
    const graph::harness::Case plain = graph::harness::find_case(label);
    graph::harness::Case sync = plain;
    sync.attrs.collective = group.get();
    sync.label += " (synchronized, one replica)";
    std::string skipped;
    graph::harness::check_forward(sync, cuda, &skipped, &plain);
    EXPECT_TRUE(skipped.empty()) << label << ": " << skipped;
    if (plain.differentiable.empty()) continue;
    graph::harness::check_gradient_parity(sync, cuda, &skipped, &plain);
    EXPECT_TRUE(skipped.empty()) << label << ": " << skipped;
  }
}

// Overlap on one GPU (a one-rank communicator): start queues the reduction on NCCL's communication stream after the
// compute stream's work so far; the compute stream may overwrite the input at once; finish makes the compute stream
// wait for the sum; an out-of-order finish is refused; the NCCL time is read back one call later, never waiting.
TEST(NcclCollective, OverlapOnOneGpuStartsBesideTheComputeStreamAndFinishesOnIt) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device here: NCCL's communication stream is built, but cannot run";
  }
  cudaSetDevice(0);
  const auto group = NcclCollective::for_devices({0}, std::chrono::seconds(60));
  const int64_t n = int64_t{1} << 20;
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  float *in = nullptr, *out = nullptr, *weight = nullptr;
  ASSERT_EQ(cudaMalloc(&in, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&weight, sizeof(float)), cudaSuccess);
  const float half = 0.5f;
  std::vector<float> host(static_cast<size_t>(n), 2.0f);
  cudaMemcpy(weight, &half, sizeof half, cudaMemcpyHostToDevice);
  cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  group->start_all_reduce_async(0, in, out, n, weight, compute, "test/bucket_0", 0);
  cudaMemsetAsync(in, 0, n * sizeof(float), compute);  // the input is free once start returns (an accumulator)
  group->start_all_reduce_async(0, out, out, n, weight, compute, "test/bucket_1", 1);  // in place, after the first
  EXPECT_THROW(group->finish_all_reduce_async(0, 1, compute), std::logic_error) << "bucket 0 is finished first";
  group->finish_all_reduce_async(0, 0, compute);
  group->finish_all_reduce_async(0, 1, compute);
  cudaMemcpyAsync(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost, compute);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(host[static_cast<size_t>(i)], 0.5f) << i;  // 2 * 0.5 * 0.5
  EXPECT_EQ(group->seconds(), 0.0) << "read one call later, never waiting";
  group->all_reduce(0, out, out, 16, 1.0f, "test/next", 2);  // reads the two started ones' times
  EXPECT_GT(group->seconds(), 0.0);
  EXPECT_GT(group->overlapped_span_seconds(), 0.0);
  EXPECT_GE(group->overlapped_blocked_seconds(), 0.0);
  cudaFree(in);
  cudaFree(out);
  cudaFree(weight);
  cudaStreamDestroy(compute);
}

}  // namespace
}  // namespace tk::nn::distribute
#else
TEST(NcclCollective, SumsWeightedGradientsIntoEveryDevice) { GTEST_SKIP() << "this build has no NCCL"; }
TEST(NcclCollective, SynchronizedBatchNormOnOneReplicaIsThePlainOne) { GTEST_SKIP() << "this build has no NCCL"; }
TEST(NcclCollective, OverlapOnOneGpuStartsBesideTheComputeStreamAndFinishesOnIt) {
  GTEST_SKIP() << "this build has no NCCL";
}
#endif
