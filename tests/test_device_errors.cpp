// Errors device kernels find in their inputs (backends/device_errors.h): the host logic the CUDA backend runs after a
// synchronization, proven here on the CPU. A gather index outside the table is, on CUDA, recorded by a check kernel
// (backends/cuda/tensor_ops.cu: each of 256 threads scans a strided share with math::first_outside, the block keeps the
// smallest) and thrown as the CPU kernel's InvalidArgument, word for word.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backends/device_errors.h"
#include "backends/math/gather.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"

namespace tk::backends {
namespace {

// The CUDA check kernel's reduction, on the host: thread t scans t, t + 256, ...; the block takes the smallest.
template <typename I>
int64_t block_first_outside(const std::vector<I>& idx, int64_t rows) {
  const auto count = static_cast<int64_t>(idx.size());
  int64_t first = count;
  for (int64_t t = 0; t < 256; ++t) first = std::min(first, math::first_outside(idx.data(), count, rows, t, 256));
  return first;
}

TEST(DeviceErrors, TheBlockScanFindsTheFirstBadIndexAsTheCpuScanDoes) {
  std::mt19937 gen(30);
  for (int64_t count : {1, 7, 256, 257, 1000, 5000})
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int64_t> idx(static_cast<size_t>(count));
      std::uniform_int_distribution<int64_t> row(0, 9), at(0, count - 1);
      for (int64_t& v : idx) v = row(gen);
      const int bad = trial % 4;  // none, one, or several bad indices (negative or too large)
      for (int k = 0; k < bad; ++k) idx[static_cast<size_t>(at(gen))] = k % 2 ? -1 : 10 + k;
      const int64_t cpu = math::first_outside(idx.data(), count, 10, 0, 1);
      EXPECT_EQ(block_first_outside(idx, 10), cpu) << count << " indices, trial " << trial;
      const auto want = std::find_if(idx.begin(), idx.end(), [](int64_t v) { return v < 0 || v >= 10; });
      EXPECT_EQ(cpu, want - idx.begin());
    }
  const std::vector<int32_t> narrow{0, 3, 12, -4};
  EXPECT_EQ(block_first_outside(narrow, 10), 2);
}

// What the CPU Gather throws for `idx` on a (10, 3) table, and the node it ran as.
std::string cpu_gather_error(const std::vector<int32_t>& idx, graph::Node* node) {
  Tensor table = Tensor::zeros({10, 3});
  Tensor indices = Tensor::from_vector<int32_t>({2, 2}, idx);
  graph::Graph g;
  const int t = g.variable("table", table), i = g.variable("ids", indices);
  graph::OpBuilder b{g, nullptr, "embedding"};
  const int y = graph::ops::gather(b, t, i, 0);
  *node = g[y];
  graph::Program p(g, {y}, {}, Device::cpu());
  try {
    p.run(graph::ExecContext{});
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(DeviceErrors, ARecordedGatherErrorIsTheCpuKernelsInvalidArgumentWordForWord) {
  graph::Node node;
  const std::string cpu = cpu_gather_error({4, 1, 12, -3}, &node);
  ASSERT_NE(cpu, "no error");
  EXPECT_NE(cpu.find("index 12 at position 2 of the indices (2, 2) is outside the table of 10 rows"), std::string::npos)
      << cpu;
  // What the check kernel writes for the same indices, then what the host throws after the synchronization.
  DeviceErrorRecord r;
  r.raised = 1;
  r.site = gather_site(node, Shape{2, 2});
  r.position = 2, r.value = 12, r.limit = 10;
  EXPECT_EQ(gather_site(node, Shape{2, 2}), r.site) << "one site per node";
  try {
    raise_recorded_error(r);
    ADD_FAILURE() << "a raised record must throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), cpu);
  }
  EXPECT_EQ(r.raised, 0u) << "reported once";
  EXPECT_NO_THROW(raise_recorded_error(r));
}

TEST(DeviceErrors, ARecordNamingNoKnownSiteIsStillAnError) {
  DeviceErrorRecord r;
  r.raised = 1;
  r.site = 1 << 30;
  EXPECT_THROW(raise_recorded_error(r), Error);
}

}  // namespace
}  // namespace tk::backends
