// CommEventRing (src/nn/distribute/comm_event_ring.h), the host bookkeeping of NCCL on its communication stream, on
// every build without a GPU: the order of the event records and stream waits around a blocking and a started
// collective, the AllReduceWait's order rule, the lagged times and the reuse of slots. And choose_overlap
// (overlap_default.h): NCCL overlaps by default, MPI on the cpu does not.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/distribute/comm_drain.h"
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
// collective takes 2 ms on the comm stream and each wait 0.5 ms. `streams` logs which stream each event is recorded
// on and which stream waits ("start0@comm", "ready0@compute"), told apart by their pointers as ReplicaEvents does
// (its comm stream is its own; the compute stream is the one the ring is given).
struct FakeEvents final : CommEvents {
  std::vector<std::string> log, streams;
  std::map<std::pair<int, CommMark>, bool> done;
  int created = 0;
  int comm_stream = 0;  // the fake's own comm stream: its address is the pointer
  void* comm() { return &comm_stream; }
  std::string on(void* stream, void* compute) const {
    if (stream == &comm_stream) return "@comm";
    return stream == compute && compute != nullptr ? "@compute" : "@other";
  }
  int create_slot() override { return created++; }
  void comm_after_compute(int slot, void* compute) override {
    log.push_back("comm_after_compute" + std::to_string(slot));
    streams.push_back("ready" + std::to_string(slot) + on(compute, compute));
    streams.push_back("waits_ready" + std::to_string(slot) + on(comm(), compute));
  }
  void record(int slot, CommMark m, void* compute) override {
    log.push_back(name(m) + std::to_string(slot));
    streams.push_back(name(m) + std::to_string(slot) + on(recorded_on_comm(m) ? comm() : compute, compute));
  }
  void compute_after_end(int slot, void* compute) override {
    log.push_back("compute_waits" + std::to_string(slot));
    streams.push_back("waits_end" + std::to_string(slot) + on(compute, compute));
  }
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

TEST(CommEventRing, EventsAreRecordedOnTheirStreams) {
  FakeEvents ev;
  CommEventRing ring(ev);
  int compute = 0;  // a compute stream, told apart from the comm stream by its pointer
  ring.after(ring.before(0, "bn", false, &compute, 0.0), &compute);
  EXPECT_EQ(ev.streams, (Log{"ready0@compute", "waits_ready0@comm", "start0@comm", "end0@comm", "waits_end0@compute"}));
  ev.streams.clear();
  ring.after(ring.before(1, "bucket", true, &compute, 0.0), &compute);
  ring.finish(1, &compute);
  EXPECT_EQ(ev.streams, (Log{"ready1@compute", "waits_ready1@comm", "start1@comm", "end1@comm", "wait_begin1@compute",
                             "waits_end1@compute", "wait_end1@compute"}));
}

TEST(CommEventRing, ACollectiveWhoseEndIsNotRecordedYetIsUnfinished) {
  FakeEvents ev;
  CommEventRing ring(ev);
  const int first = ring.before(0, "bucket_0", false, nullptr, 0.0);
  ring.after(first, nullptr);
  ev.finish_comm(first);
  ring.harvest();  // done and read: its slot is free
  ASSERT_EQ(ring.pending(), 0u);
  // The next collective reuses the slot, whose end event still says "done" (the last one's) until after() records it
  // again: its host thread may be stuck inside ncclAllReduce, which the watchdog must see.
  const int second = ring.before(1, "bucket_1", false, nullptr, 5.0);
  ASSERT_EQ(second, first);
  ASSERT_NE(ring.oldest_unfinished(), nullptr) << "a stale end event must not hide a collective not queued yet";
  EXPECT_EQ(ring.oldest_unfinished()->sequence, 1);
  EXPECT_EQ(ring.oldest_unfinished()->queued_s, 5.0);
  EXPECT_EQ(ring.harvest().nccl_ms, 0.0) << "nor be read as its time";
  ring.after(second, nullptr);
  ev.done.clear();
  EXPECT_EQ(ring.oldest_unfinished()->sequence, 1) << "recorded, not done";
  ev.finish_comm(second);
  EXPECT_EQ(ring.oldest_unfinished(), nullptr);
  EXPECT_EQ(ring.harvest().nccl_ms, 2.0);
}

// NcclCollective's teardown (comm_drain.h) with fake streams and a fake clock: 10 ms per pause.
struct FakeStreams {
  std::vector<int> busy_for;  // polls each stream stays busy; -1: forever
  bool fail = false;
  double clock = 0;
  int pauses = 0;
  DrainOutcome drain(double timeout_s) {
    return drain_streams(
        busy_for.size(),
        [&](size_t i) {
          if (fail && i == 1) return StreamState::failed;
          int& b = busy_for[i];
          if (b == 0) return StreamState::idle;
          if (b > 0) --b;
          return StreamState::busy;
        },
        timeout_s, [&] { return clock; },
        [&] {
          clock += 0.01;
          ++pauses;
        });
  }
};

TEST(CommDrain, StreamsThatDrainAreFinalized) {
  FakeStreams f{.busy_for = {3, 0, 5}};
  const DrainOutcome o = f.drain(300);
  EXPECT_EQ(o, DrainOutcome::drained);
  EXPECT_TRUE(finalize_after(o));
  EXPECT_EQ(f.pauses, 5) << "polled until the slowest stream is idle, no longer";
}

TEST(CommDrain, AStreamStuckPastTheTimeoutIsAbortedNotFinalized) {
  // A replica threw mid-step: its peers' collectives wait forever on their comm streams. Finalizing would hang.
  FakeStreams f{.busy_for = {0, -1}};
  const DrainOutcome o = f.drain(0.5);
  EXPECT_EQ(o, DrainOutcome::timed_out);
  EXPECT_FALSE(finalize_after(o));
  EXPECT_GE(f.clock, 0.5);
  EXPECT_LT(f.clock, 0.52) << "it gives up at the timeout";
}

TEST(CommDrain, ACudaErrorIsAbortedAtOnce) {
  FakeStreams f{.busy_for = {-1, 0}, .fail = true};
  const DrainOutcome o = f.drain(300);
  EXPECT_EQ(o, DrainOutcome::failed);
  EXPECT_FALSE(finalize_after(o));
  EXPECT_EQ(f.pauses, 0);
  FakeStreams none;
  EXPECT_EQ(none.drain(1), DrainOutcome::drained) << "no replicas: nothing to wait for";
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
