// CommEventRing (comm_event_ring.h): plain C++, in every build.
#include "nn/distribute/comm_event_ring.h"

#include <stdexcept>

namespace tk::nn::distribute {

int CommEventRing::before(int64_t sequence, std::string what, bool started, void* compute, double now_s) {
  int slot = -1;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = ev_.create_slot();
    ++slots_;
  }
  ev_.comm_after_compute(slot, compute);
  ev_.record(slot, CommMark::start, compute);
  entries_.push_back({.slot = slot,
                      .sequence = sequence,
                      .what = std::move(what),
                      .queued_s = now_s,
                      .started = started,
                      .awaiting = started});
  return slot;
}

void CommEventRing::after(int slot, void* compute) {
  ev_.record(slot, CommMark::end, compute);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
    if (it->slot == slot) {
      it->ended = true;
      if (!it->started) ev_.compute_after_end(slot, compute);
      return;
    }
  throw std::logic_error("CommEventRing::after: slot " + std::to_string(slot) + " was not given by before()");
}

void CommEventRing::finish(int64_t sequence, void* compute) {
  for (Entry& e : entries_) {
    if (!e.awaiting) continue;
    if (e.sequence != sequence)
      throw std::logic_error("all-reduce wait for collective " + std::to_string(sequence) +
                             " but the oldest started one not finished is " + std::to_string(e.sequence) + " ('" +
                             e.what + "'): started collectives must be finished in the order they were started");
    ev_.record(e.slot, CommMark::wait_begin, compute);
    ev_.compute_after_end(e.slot, compute);
    ev_.record(e.slot, CommMark::wait_end, compute);
    e.awaiting = false;
    e.waited = true;
    return;
  }
  throw std::logic_error("all-reduce wait for collective " + std::to_string(sequence) +
                         ", which was not started (or was finished already)");
}

CommTimes CommEventRing::harvest() {
  CommTimes t;
  for (Entry& e : entries_) {
    if (!e.timed) {
      if (!e.ended || !ev_.complete(e.slot, CommMark::end))
        break;  // the comm stream completes in order: later ones are not done
      const double ms = ev_.elapsed_ms(e.slot, CommMark::start, CommMark::end);
      t.nccl_ms += ms;
      if (e.started) t.started_nccl_ms += ms;
      e.timed = true;
    }
    if (e.waited && !e.wait_timed && ev_.complete(e.slot, CommMark::wait_end)) {
      t.blocked_ms += ev_.elapsed_ms(e.slot, CommMark::wait_begin, CommMark::wait_end);
      e.wait_timed = true;
    }
  }
  // Free the front's slots nothing refers to any more (in order, so the deque stays the queue order).
  while (!entries_.empty()) {
    const Entry& e = entries_.front();
    if (!e.timed || e.awaiting || (e.waited && !e.wait_timed)) break;
    free_.push_back(e.slot);
    entries_.pop_front();
  }
  return t;
}

const CommEventRing::Entry* CommEventRing::oldest_unfinished() {
  for (const Entry& e : entries_)
    if (!e.timed && (!e.ended || !ev_.complete(e.slot, CommMark::end))) return &e;
  return nullptr;
}

size_t CommEventRing::awaiting() const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.awaiting ? 1 : 0;
  return n;
}

}  // namespace tk::nn::distribute
