// CommEventRing (src/nn/distribute/comm_event_ring.h), the host bookkeeping of NCCL on its communication stream, on
// every build without a GPU: the order of the event records and stream waits around a blocking and a started
// collective, the AllReduceWait's order rule, the lagged times and the reuse of slots. And choose_overlap
// (overlap_default.h): NCCL overlaps by default, MPI on the cpu does not.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/distribute/comm_event_ring.h"
#include "nn/distribute/overlap_default.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/distribute.h"

namespace tk::nn::distribute {
namespace {

const char* name(CommMark m) {
  switch (m) {
    case CommMark::start:
      return "start";
    case CommMark::end:
      return "end";
    case CommMark::wait_begin:
      return "wait_begin";
    case CommMark::wait_end:
      return "wait_end";
  }
  return "?";
}

// Logs each call ("comm_after_compute0", "end0", "compute_waits0"); events complete when the test says so; each
// collective takes 2 ms on the comm stream and each wait 0.5 ms.
struct FakeEvents final : CommEvents {
  std::vector<std::string> log;
  std::map<std::pair<int, CommMark>, bool> done;
  int created = 0;
  int create_slot() override { return created++; }
  void comm_after_compute(int slot, void*) override { log.push_back("comm_after_compute" + std::to_string(slot)); }
  void record(int slot, CommMark m, void*) override { log.push_back(name(m) + std::to_string(slot)); }
  void compute_after_end(int slot, void*) override { log.push_back("compute_waits" + std::to_string(slot)); }
  bool complete(int slot, CommMark m) override { return done[{slot, m}]; }
  double elapsed_ms(int, CommMark from, CommMark) override { return from == CommMark::start ? 2.0 : 0.5; }
  void finish_comm(int slot) { done[{slot, CommMark::end}] = true; }
  void finish_wait(int slot) { done[{slot, CommMark::wait_end}] = true; }
};

using Log = std::vector<std::string>;

TEST(CommEventRing, ABlockingCollectiveIsWaitedForAtOnce) {
  FakeEvents ev;
  CommEventRing ring(ev);
  const int slot = ring.before(0, "bn/stats", false, nullptr, 0.0);
  ring.after(slot, nullptr);
  EXPECT_EQ(ev.log, (Log{"comm_after_compute0", "start0", "end0", "compute_waits0"}));
  EXPECT_EQ(ring.awaiting(), 0u);
}

TEST(CommEventRing, AStartedCollectiveIsWaitedForAtItsAllReduceWait) {
  FakeEvents ev;
  CommEventRing ring(ev);
  const int a = ring.before(0, "bucket_0", true, nullptr, 0.0);
  ring.after(a, nullptr);
  const int b = ring.before(1, "bucket_1", true, nullptr, 0.0);
  ring.after(b, nullptr);
  EXPECT_EQ(ev.log, (Log{"comm_after_compute0", "start0", "end0", "comm_after_compute1", "start1", "end1"}))
      << "the compute stream runs on: no wait yet";
  EXPECT_EQ(ring.awaiting(), 2u);
  ev.log.clear();
  ring.finish(0, nullptr);
  ring.finish(1, nullptr);
  EXPECT_EQ(ev.log, (Log{"wait_begin0", "compute_waits0", "wait_end0", "wait_begin1", "compute_waits1", "wait_end1"}));
  EXPECT_EQ(ring.awaiting(), 0u);
}

TEST(CommEventRing, StartedCollectivesAreFinishedInTheOrderTheyWereStarted) {
  FakeEvents ev;
  CommEventRing ring(ev);
  ring.after(ring.before(3, "bucket_3", true, nullptr, 0.0), nullptr);
  ring.after(ring.before(4, "bucket_4", true, nullptr, 0.0), nullptr);
  try {
    ring.finish(4, nullptr);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("oldest started one not finished is 3 ('bucket_3')"), std::string::npos)
        << e.what();
  }
  ring.finish(3, nullptr);
  ring.finish(4, nullptr);
  EXPECT_THROW(ring.finish(4, nullptr), std::logic_error) << "finished already";
  EXPECT_THROW(ring.finish(9, nullptr), std::logic_error) << "never started";
}

TEST(CommEventRing, TimesAreReadOnceDoneAndSlotsReusedWhenNothingRefersToThem) {
  FakeEvents ev;
  CommEventRing ring(ev);
  const int blocking = ring.before(0, "bn", false, nullptr, 0.0);
  ring.after(blocking, nullptr);
  const int started = ring.before(1, "bucket", true, nullptr, 0.0);
  ring.after(started, nullptr);
  CommTimes t = ring.harvest();
  EXPECT_EQ(t.nccl_ms, 0.0) << "nothing complete: nothing read, nothing waited for";
  EXPECT_EQ(ring.oldest_unfinished()->sequence, 0);
  ev.finish_comm(blocking);
  ev.finish_comm(started);
  EXPECT_EQ(ring.oldest_unfinished(), nullptr);
  t = ring.harvest();
  EXPECT_EQ(t.nccl_ms, 4.0);
  EXPECT_EQ(t.started_nccl_ms, 2.0);
  EXPECT_EQ(t.blocked_ms, 0.0);
  EXPECT_EQ(ring.pending(), 1u) << "the blocking one's slot is free; the started one awaits its wait";
  ring.finish(1, nullptr);
  t = ring.harvest();
  EXPECT_EQ(t.nccl_ms, 0.0) << "each time is read once";
  EXPECT_EQ(ring.pending(), 1u) << "its wait is not done: the slot still holds its events";
  ev.finish_wait(started);
  t = ring.harvest();
  EXPECT_EQ(t.blocked_ms, 0.5);
  EXPECT_EQ(ring.pending(), 0u);
  // Both slots are free: the next two collectives reuse them, no new events.
  ev.done.clear();
  ring.after(ring.before(2, "a", false, nullptr, 0.0), nullptr);
  ring.after(ring.before(3, "b", false, nullptr, 0.0), nullptr);
  EXPECT_EQ(ev.created, 2);
  EXPECT_EQ(ring.slots(), 2u);
  ring.after(ring.before(4, "c", false, nullptr, 0.0), nullptr);
  EXPECT_EQ(ev.created, 3) << "a third in flight needs a third slot";
}

TEST(CommEventRing, HarvestStopsAtTheFirstCollectiveNotDone) {
  FakeEvents ev;
  CommEventRing ring(ev);
  for (int i = 0; i < 3; ++i) ring.after(ring.before(i, "x", false, nullptr, 0.0), nullptr);
  ev.finish_comm(0);
  ev.finish_comm(2);  // cannot be seen before 1 on one stream; the ring does not read past 1
  EXPECT_EQ(ring.harvest().nccl_ms, 2.0);
  EXPECT_EQ(ring.oldest_unfinished()->sequence, 1);
  EXPECT_EQ(ring.pending(), 2u);
}

TEST(OverlapChoice, NcclOverlapsUnlessTurnedOffAndMpiOnlyWhenAsked) {
  EXPECT_TRUE(choose_overlap(std::nullopt, nullptr, OverlapGroup::nccl).overlap);
  EXPECT_TRUE(choose_overlap(std::nullopt, "", OverlapGroup::nccl).overlap);
  EXPECT_FALSE(choose_overlap(std::nullopt, "0", OverlapGroup::nccl).overlap);
  EXPECT_FALSE(choose_overlap(false, "1", OverlapGroup::nccl).overlap) << "the option wins over the environment";
  EXPECT_FALSE(choose_overlap(std::nullopt, nullptr, OverlapGroup::mpi).overlap);
  EXPECT_TRUE(choose_overlap(std::nullopt, "on", OverlapGroup::mpi).overlap);
  EXPECT_TRUE(choose_overlap(true, nullptr, OverlapGroup::mpi).overlap);
  const OverlapChoice cpu = choose_overlap(true, nullptr, OverlapGroup::in_process_cpu);
  EXPECT_FALSE(cpu.overlap);
  EXPECT_NE(cpu.note.find("ignored"), std::string::npos);
  EXPECT_THROW(choose_overlap(std::nullopt, "maybe", OverlapGroup::nccl), InvalidArgument);
}

TEST(OverlapChoice, CpuReplicasInOneProcessSayAnAskedOverlapIsIgnored) {
  const tk::distribute::MirroredStrategy cpu({Device::cpu()}, {.overlap = true});
  EXPECT_NE(cpu.describe().find("overlap asked for but not built for cpu replicas in one process (ignored)"),
            std::string::npos)
      << cpu.describe();
  const tk::distribute::MirroredStrategy plain({Device::cpu()});
  EXPECT_EQ(plain.describe().find("overlap"), std::string::npos) << plain.describe();
}

}  // namespace
}  // namespace tk::nn::distribute
