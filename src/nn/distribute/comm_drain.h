// How NcclCollective (nccl_collective.cpp) ends its communicators: the host decision, in every build, so that
// tests/test_comm_event_ring.cpp checks it with fakes on the CPU. At teardown the comm streams are drained while the
// watchdog still runs (it ends the process, exit 70, when a collective is stuck past the timeout), polling each
// stream without blocking, for at most the collective timeout; only then is the watchdog stopped. Drained: the
// communicators are finalized (a collective among them) and destroyed. Not drained (a stream still busy at the
// timeout, or a CUDA error): they are aborted, never finalized — finalizing would wait, silently and forever, for a
// replica that threw mid-step and never queued its part of a collective.
//
//   DrainOutcome o = drain_streams(n, [&](size_t i) { return query(comm[i]); }, timeout_s, now, pause);
//   if (finalize_after(o)) { /* ncclCommFinalize + ncclCommDestroy */ } else { /* ncclCommAbort */ }
#pragma once
#include <cstddef>
#include <functional>

namespace tk::nn::distribute {

enum class StreamState { idle, busy, failed };  // cudaStreamQuery: cudaSuccess, cudaErrorNotReady, anything else
enum class DrainOutcome { drained, timed_out, failed };

// Polls query(i), i in [0, n), until every stream is idle (drained), one fails (failed), or `timeout_s` has passed
// since the first poll on `now`'s clock (timed_out); `pause` runs between rounds. Never blocks in query.
DrainOutcome drain_streams(size_t n, const std::function<StreamState(size_t)>& query, double timeout_s,
                           const std::function<double()>& now, const std::function<void()>& pause);

// Whether the communicators may be finalized (else they are aborted).
inline bool finalize_after(DrainOutcome o) { return o == DrainOutcome::drained; }

}  // namespace tk::nn::distribute
