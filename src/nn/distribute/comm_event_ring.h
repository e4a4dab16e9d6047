// The host bookkeeping of NCCL collectives on a communication stream of their own (nccl_collective.cpp holds the CUDA
// calls): which events each collective records where, which wait the compute stream makes for which bucket, and the
// collectives' times read back lagged, never waiting. Host code every build compiles; the CUDA calls are behind
// CommEvents, so tests/test_comm_event_ring.cpp checks the order with a fake on the CPU.
//
// Per replica, every collective (a bucket's AllReduce, a synchronized BatchNormalization's sums) goes:
//   compute: ... record ready                   (the gradient / sums are written)
//   comm:        wait ready, record start, ncclAllReduce, record end
//   compute:     wait end                       at once (blocking: BN's next phase reads the sums), or
//                record wait_begin, wait end, record wait_end   at its AllReduceWait (started: overlap)
// The comm stream is non-blocking (no implicit order with the legacy default stream) and runs the collectives in the
// order they are queued, so they complete in that order. Started collectives are finished in the order they were
// started (graph/collective.h's rule); finish() refuses another order, naming both.
//
// Times (harvest(), called from the replica's own thread one step later, and never blocking): start -> end of each
// collective is its NCCL time (seconds() on the epoch line); for started ones, wait_begin -> wait_end is how long the
// compute stream was blocked at the AllReduceWait, so 1 - blocked / NCCL time is the share other work hid.
// A slot (its events) is reused once its times are read and no wait still has to refer to it.
//
//   tk::nn::distribute::CommEventRing ring(events);
//   int slot = ring.before(seq, "bucket_0", /*started=*/true, compute, now);   // comm after compute, start
//   ncclAllReduce(..., comm_stream); ring.after(slot, compute);                 // end (and wait, when blocking)
//   ... later, the AllReduceWait: ring.finish(seq, compute);
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace tk::nn::distribute {

enum class CommMark { start, end, wait_begin, wait_end };

// Where CommEvents::record records a mark: start and end on the comm stream (they time NCCL's work there), the waits'
// marks on the compute stream (they time how long it was blocked).
inline bool recorded_on_comm(CommMark m) { return m == CommMark::start || m == CommMark::end; }

class CommEvents {
 public:
  virtual ~CommEvents() = default;
  virtual int create_slot() = 0;                                 // a new set of events; returns its number
  virtual void comm_after_compute(int slot, void* compute) = 0;  // record ready on compute; comm waits for it
  virtual void record(int slot, CommMark m, void* compute) = 0;  // start, end on comm; wait_* on compute
  virtual void compute_after_end(int slot, void* compute) = 0;   // the compute stream waits for end
  virtual bool complete(int slot, CommMark m) = 0;               // a query: never blocks
  virtual double elapsed_ms(int slot, CommMark from, CommMark to) = 0;
};

struct CommTimes {
  double nccl_ms = 0;          // start -> end, every collective harvested
  double started_nccl_ms = 0;  // of those, the started (overlapped) ones
  double blocked_ms = 0;       // wait_begin -> wait_end of the started ones
};

class CommEventRing {
 public:
  struct Entry {
    int slot = -1;
    int64_t sequence = -1;
    std::string what;
    double queued_s = 0;    // when it was queued (the caller's clock), for the watchdog
    bool started = false;   // finished by finish() (overlap), not at once
    bool ended = false;     // after() recorded its end event (until then the slot's end event is stale or unrecorded)
    bool awaiting = false;  // started and not finished yet
    bool timed = false;     // start -> end read
    bool waited = false;    // its wait_begin / wait_end were recorded
    bool wait_timed = false;
  };

  explicit CommEventRing(CommEvents& events) : ev_(events) {}

  // Before queueing a collective: a slot (a free one, else a new one), the comm stream after the compute stream's
  // work so far, and its start event.
  int before(int64_t sequence, std::string what, bool started, void* compute, double now_s);
  // After queueing it: its end event; a blocking collective also makes the compute stream wait for it at once.
  void after(int slot, void* compute);
  // The AllReduceWait of started collective `sequence`: the compute stream waits for its end (timed). It must be the
  // oldest started collective not finished yet; std::logic_error naming both otherwise.
  void finish(int64_t sequence, void* compute);
  // Reads the times of the collectives done so far (oldest first; queries only) and frees the slots nothing refers
  // to any more. Returns what was read this time.
  CommTimes harvest();
  // The oldest collective whose end is not complete (for the watchdog), or null. One whose end event after() has not
  // recorded yet (its host thread is inside ncclAllReduce, maybe stuck there) counts as unfinished: a reused slot's
  // end event still says the last collective's "done", an unrecorded one says "done" at once.
  const Entry* oldest_unfinished();

  size_t pending() const { return entries_.size(); }
  size_t slots() const { return slots_; }
  size_t awaiting() const;

 private:
  CommEvents& ev_;
  std::deque<Entry> entries_;
  std::vector<int> free_;
  size_t slots_ = 0;
};

}  // namespace tk::nn::distribute
