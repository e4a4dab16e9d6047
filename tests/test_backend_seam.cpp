// The backend seam (graph/backend.h, graph/backend_objects.h, graph/host_threads.h): what nn/ gets from a backend
// without naming its types. The CPU backend makes no stream, staging, read-back slots or row gather (nn/ then stages,
// copies and reads synchronously), and the host's parallel loop covers every index once.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "graph/backend.h"
#include "graph/host_threads.h"
#include "nn/training/lagged_logs.h"

namespace {

using tk::Device;
using tk::DeviceKind;

TEST(BackendSeam, TheCpuBackendMakesNothingAsynchronous) {
  tk::graph::Backend& cpu = tk::graph::backend(DeviceKind::cpu);
  EXPECT_EQ(cpu.make_stream(Device::cpu()), nullptr);
  EXPECT_EQ(cpu.make_input_staging(Device::cpu(), {64, 16}, nullptr), nullptr);
  EXPECT_EQ(cpu.make_readback_slots(Device::cpu(), 2), nullptr);
  EXPECT_EQ(cpu.make_row_gather(Device::cpu()), nullptr);
  EXPECT_EQ(cpu.kernel_choices({}), "");  // no programs: nothing recorded (not every shape measured so far)
}

TEST(BackendSeam, TheCpuReadsLogsIntoAHostStore) {
  std::unique_ptr<tk::nn::LogStore> s = tk::nn::LaggedLogs::store_for(Device::cpu(), 2);
  ASSERT_NE(s, nullptr);
  s->grow(1, 12, 0);
  EXPECT_GE(s->capacity(1), 12u);
  EXPECT_EQ(s->capacity(0), 0u);  // slots are independent
}

// Counts how often each index of [0, n) is visited.
std::vector<int> visits(int64_t n, int64_t grain, bool lvalue) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  auto body = [&](int64_t begin, int64_t end) {
    ASSERT_LE(0, begin);
    ASSERT_LE(begin, end);
    ASSERT_LE(end, n);
    for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
  };
  if (lvalue)
    tk::graph::host_parallel_for(n, body, grain);
  else
    tk::graph::host_parallel_for(n, std::move(body), grain);
  std::vector<int> out;
  for (const std::atomic<int>& s : seen) out.push_back(s.load());
  return out;
}

TEST(BackendSeam, HostParallelForVisitsEveryIndexOnce) {
  for (const bool lvalue : {true, false}) {
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
      const std::vector<int> v = visits(n, /*grain=*/16, lvalue);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], 1) << "n " << n << ", index " << i;
    }
    const std::vector<int> one_chunk = visits(100, tk::graph::kHostParallelGrain, lvalue);  // below the grain
    for (const int c : one_chunk) ASSERT_EQ(c, 1);
  }
}

TEST(BackendSeam, HostThreadsArePositive) {
  EXPECT_GE(tk::graph::host_threads(), 1);
  EXPECT_FALSE(tk::graph::pin_host_threads(0));  // refused, nothing changed
  EXPECT_GE(tk::graph::host_threads(), 1);
}

}  // namespace
