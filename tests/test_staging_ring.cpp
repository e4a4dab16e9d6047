// StagingRing (src/backends/cuda/staging_ring.h), the host logic of CUDA input staging, on every build without a GPU:
// the pinned buffers' layout, the exact order of the waits and copies, and the three hazards checked by a fake device
// that models what each CUDA call guarantees and fails the test when a copy or a read could race.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/staging_ring.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
namespace {

// Records each call, as "wait0", "after_compute", "copy1@256->0x10:8", "record1", "compute_after1".
struct LogEvents final : StagingEvents {
  std::vector<std::string> log;
  void host_wait_copied(int b) override { log.push_back("wait" + std::to_string(b)); }
  void copy_after_compute() override { log.push_back("after_compute"); }
  void copy(int b, size_t offset, void* dst, size_t bytes) override {
    log.push_back("copy" + std::to_string(b) + "@" + std::to_string(offset) + "->" +
                  std::to_string(reinterpret_cast<uintptr_t>(dst)) + ":" + std::to_string(bytes));
  }
  void record_copied(int b) override { log.push_back("record" + std::to_string(b)); }
  void compute_after_copied(int b) override { log.push_back("compute_after" + std::to_string(b)); }
};

void* at(uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(StagingRing, LayoutAlignsEveryRegionAndNeverOverlaps) {
  const StagingLayout l = staging_layout({100, 0, 256, 257, 4});
  ASSERT_EQ(l.offset.size(), 5u);
  EXPECT_EQ(l.offset, (std::vector<size_t>{0, 256, 256, 512, 1024}));
  EXPECT_EQ(l.total, 1280u);
  for (size_t i = 0; i < l.offset.size(); ++i) {
    EXPECT_EQ(l.offset[i] % kStagingAlignment, 0u) << i;
    EXPECT_LE(l.offset[i] + l.bytes[i], l.total) << i;
    if (i + 1 < l.offset.size()) {
      EXPECT_LE(l.offset[i] + l.bytes[i], l.offset[i + 1]) << i;
    }
  }
  EXPECT_EQ(staging_layout({}).total, kStagingAlignment) << "a buffer is never empty (cudaHostAlloc of 0 bytes)";
  // x of (128, 784) float32 and y of (128) int32: 401408 bytes, then 512.
  const StagingLayout mnist = staging_layout({128 * 784 * 4, 128 * 4});
  EXPECT_EQ(mnist.offset[1], 401408u);
  EXPECT_EQ(mnist.total, 401408u + 512u);
}

TEST(StagingRing, BuffersTakeTurnsAndEachCopyIsFencedOnBothSides) {
  LogEvents ev;
  StagingRing ring({64, 8}, ev);
  std::vector<std::string> want;
  for (int k = 0; k < 4; ++k) {
    const int b = ring.acquire();
    EXPECT_EQ(b, k % 2) << "batch " << k;
    EXPECT_EQ(ring.current(), b);
    ring.copy(0, at(0x1000), 64);
    ring.copy(1, at(0x2000), 8);
    ring.submit();
    EXPECT_EQ(ring.current(), -1);
    EXPECT_TRUE(ring.copy_queued(b));
    const std::string s = std::to_string(b);
    if (k >= 2) want.push_back("wait" + s);  // the buffer's copy two batches ago
    want.insert(want.end(), {"after_compute", "copy" + s + "@0->4096:64", "copy" + s + "@256->8192:8", "record" + s,
                             "compute_after" + s});
  }
  EXPECT_EQ(ev.log, want);
  ev.log.clear();
  ring.drain();
  EXPECT_EQ(ev.log, (std::vector<std::string>{"wait0", "wait1"}));
  ev.log.clear();
  ring.drain();
  EXPECT_TRUE(ev.log.empty()) << "nothing queued after a drain";
  EXPECT_EQ(ring.acquire(), 0);
  EXPECT_TRUE(ev.log.empty()) << "buffer 0 was drained: no wait";
}

TEST(StagingRing, AnEmptyBatchQueuesNothingAndWaitsForNothing) {
  LogEvents ev;
  StagingRing ring({64}, ev);
  ring.acquire();
  ring.copy(0, at(0x1000), 0);
  ring.submit();
  EXPECT_TRUE(ev.log.empty());
  EXPECT_FALSE(ring.copy_queued(0));
}

TEST(StagingRing, MisuseIsRefusedBeforeAnythingIsQueued) {
  LogEvents ev;
  StagingRing ring({64, 8}, ev);
  EXPECT_THROW(ring.copy(0, at(0x1000), 8), InvalidArgument) << "outside acquire()";
  EXPECT_THROW(ring.submit(), InvalidArgument);
  ring.acquire();
  EXPECT_THROW(ring.acquire(), InvalidArgument) << "twice";
  EXPECT_THROW(ring.copy(1, at(0x2000), 9), InvalidArgument) << "more bytes than the region";
  EXPECT_THROW(ring.copy(2, at(0x2000), 1), std::exception) << "no such region";
  EXPECT_THROW(ring.offset(2), InvalidArgument);
  EXPECT_TRUE(ev.log.empty());
}

TEST(StagingRing, AnAbandonedBatchQueuesNothingAndItsBufferIsNext) {
  LogEvents ev;
  StagingRing ring({64}, ev);
  EXPECT_EQ(ring.acquire(), 0);
  ring.copy(0, at(0x1000), 64);
  ring.submit();
  EXPECT_EQ(ring.acquire(), 1);
  ring.copy(0, at(0x1000), 64);
  ring.abandon();  // the gather threw
  EXPECT_FALSE(ring.copy_queued(1));
  ev.log.clear();
  EXPECT_EQ(ring.acquire(), 1) << "the abandoned buffer again";
  ring.submit();
  EXPECT_TRUE(ev.log.empty()) << "the abandoned copy was dropped, not issued";
}

// A model of the device: what each call guarantees, with the hazards as assertions.
//   - copies queued on the copy stream are done only once the host waits on their buffer's event (the worst case:
//     nothing finishes by itself);
//   - a copy may start only after the compute queued before it (it must have waited since the last run);
//   - a run reads the inputs, so every queued copy must have been waited for by the compute stream.
struct ModelEvents final : StagingEvents {
  bool copy_busy[StagingRing::kBuffers] = {};          // a queued copy may still read the buffer
  bool recorded_unwaited[StagingRing::kBuffers] = {};  // copied event recorded, compute stream has not waited
  bool compute_since_fence = false;                    // a run queued after the copy stream's last wait on compute
  bool copies_since_record = false;
  int copies = 0, waits = 0;
  void host_wait_copied(int b) override {
    copy_busy[b] = false;
    ++waits;
  }
  void copy_after_compute() override { compute_since_fence = false; }
  void copy(int b, size_t, void*, size_t) override {
    EXPECT_FALSE(compute_since_fence) << "hazard 2: a copy into the inputs may overlap a queued step";
    copy_busy[b] = true;
    copies_since_record = true;
    ++copies;
  }
  void record_copied(int b) override {
    EXPECT_TRUE(copies_since_record);
    copies_since_record = false;
    recorded_unwaited[b] = true;
  }
  void compute_after_copied(int b) override { recorded_unwaited[b] = false; }
  // The host writes buffer b (the gather).
  void gather(int b) { EXPECT_FALSE(copy_busy[b]) << "hazard 1: the gather overwrites a buffer a copy reads"; }
  // A program run on the compute stream.
  void run() {
    for (bool r : recorded_unwaited) EXPECT_FALSE(r) << "hazard 3: the step may read its inputs before they land";
    EXPECT_FALSE(copies_since_record) << "copies queued without their event";
    compute_since_fence = true;
  }
};

TEST(StagingRing, NoHazardOverManyStepsOfRandomBatches) {
  ModelEvents dev;
  StagingRing ring({4096, 512, 0}, dev);
  std::mt19937 gen(5);
  for (int k = 0; k < 200; ++k) {
    const int b = ring.acquire();
    dev.gather(b);
    if (gen() % 10 == 0) {  // a gather that throws now and then
      ring.abandon();
      continue;
    }
    ring.copy(0, at(0x1000), gen() % 4097);
    ring.copy(1, at(0x9000), gen() % 513);
    ring.copy(2, at(0xa000), 0);
    ring.submit();
    dev.run();
    if (gen() % 7 == 0) dev.run();  // another program in between (eval, apply) on the same compute stream
  }
  EXPECT_GT(dev.copies, 300);
  EXPECT_GT(dev.waits, 100) << "buffers were reused while their copies were still queued, and waited for";
  ring.drain();
  for (bool busy : dev.copy_busy) EXPECT_FALSE(busy) << "drain leaves no copy reading a buffer about to be freed";
}

}  // namespace
}  // namespace tk::cuda
