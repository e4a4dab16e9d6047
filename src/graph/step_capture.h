// Capturing a program's step as a CUDA Graph (issue 13), the host side: the per-program state machine that decides
// whether a run launches its kernels one by one, captures them, or replays the captured graph, and when a capture
// stops being valid. The device side is a StepLauncher from the program's backend (CUDA: backends/cuda/step_graph.cpp;
// the CPU has none), so tests/test_step_capture.cpp drives this with a fake on the CPU.
//
// States (one program):
//   off      capture is not tried at all (the reason is kept: TK_CUDA_GRAPHS=0, TK_PROFILE, collectives, no graphs);
//   cold     not run yet: the next run is a plain warm-up (libraries make their plans, lazy resources are created);
//   warm     ran plainly at least once: the next run captures;
//   captured replays its graph while the binding (arena address, stream) is the captured one; another binding sends
//            it back to warm (the next run captures again; nothing was baked from the old arena); another host key
//            (below) sends it back to cold: the graph is dropped, one plain run warms up, the next run captures;
//   failed   a capture or its instantiation failed: the reason is logged once, the program runs plainly from then on
//            and is never captured again.
// A run on the legacy default stream (a program without a stream of its own) is never captured and changes no state.
// Per-step values never invalidate a capture: they live in device memory (graph::StepScalars), uploaded before each
// launch outside the graph. Weights re-uploaded into the same buffers are the same binding.
// The host key: what a graph froze besides its binding, and what a warm-up was for. The host values kernels read
// when they are queued (the optimizer's hyperparameters and whether clipnorm's kernel launches, UpdateConfig; the
// algorithms op determinism picks), and the thread (cuBLASLt and cuDNN handles and plans are per thread: made inside
// a capture they fail it, so a program warmed up on one thread is cold on another).
//
//   graph::StepCapture cap(graph::capture_off_reason(...));
//   switch (cap.next(arena, stream, key)) { case Action::plain: ...; case Action::capture: ...; ... }
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/op.h"

namespace tk::graph {

// The device half, one per program (Backend::make_step_launcher). Failures throw Error with the reason.
class StepLauncher {
 public:
  virtual ~StepLauncher() = default;
  // Queues the copy of a step's scalars (bytes from host memory the caller may reuse at once) to device memory `dst`
  // on `stream`, before the step's kernels; never captured.
  virtual void upload_scalars(void* dst, const void* host, size_t bytes, void* stream) = 0;
  // Starts capturing what the calling thread queues on `stream` (nothing queued runs until launch()).
  virtual void begin_capture(void* stream) = 0;
  // Ends the capture and instantiates the graph.
  virtual void end_capture(void* stream) = 0;
  // Ends a capture whose work threw; drops what was captured. Never throws.
  virtual void abort_capture(void* stream) noexcept = 0;
  // Queues the instantiated graph on `stream`.
  virtual void launch(void* stream) = 0;
  // Destroys the captured graph (a binding changed). Never throws.
  virtual void reset() noexcept = 0;
};

// Why a program is never captured, or "" when it may be: graphs switched off (TK_CUDA_GRAPHS=0), per-kernel
// profiling (TK_PROFILE synchronizes after each kernel, which a graph cannot), a collective (NCCL supports capture,
// but the collectives' progress polling and the replicas' rendezvous are host-side steps; not captured, to be
// conservative), or a backend without graphs.
std::string capture_off_reason(bool backend_has_graphs, bool graphs_env_on, bool profiling, bool has_collective);
// TK_CUDA_GRAPHS: on unless set to "0".
bool cuda_graphs_enabled_by_env();

// The host key (above) of a run: a hash of the values `configs` hold that kernels read on the host (not the learning
// rate or the iteration count: step scalars) and of `deterministic`, and the calling thread.
struct HostKey {
  uint64_t values = 0;
  uint64_t thread = 0;
  bool operator==(const HostKey&) const = default;
};
uint64_t host_values_key(const std::vector<const UpdateConfig*>& configs, bool deterministic);
uint64_t this_thread_key();

class StepCapture {
 public:
  enum class State { off, cold, warm, captured, failed };
  // drop: the captured graph must be destroyed (the caller resets its launcher), then the run is plain.
  enum class Action { plain, capture, replay, drop };

  explicit StepCapture(std::string off_reason);
  // What this run does, given where the program is bound now (its arena's address, its stream) and the host key.
  Action next(const void* arena, const void* stream, const HostKey& key = {});
  // After Action::plain or drop: the program ran once more plainly.
  void ran_plain();
  // After Action::capture: the graph was captured and instantiated for the binding given to next().
  void captured();
  // After Action::capture: it failed. Returns true the first time (the caller logs the reason once).
  bool failed(const std::string& why);
  // The binding changed (bind_arena, set_stream): a captured graph must be dropped (the caller resets its launcher).
  // Returns true when there was one.
  bool invalidate();

  State state() const { return state_; }
  const std::string& reason() const { return reason_; }  // why off or failed
  int captures() const { return captures_; }             // successful captures so far
  int replays() const { return replays_; }               // runs that replayed (the capturing run included)
  int drops() const { return drops_; }                   // graphs dropped for another host key

 private:
  State state_;
  std::string reason_;
  const void* arena_ = nullptr;
  const void* stream_ = nullptr;
  HostKey key_;  // cold: of the coming warm-up; warm: of the last warm-up; captured: of the graph
  int captures_ = 0, replays_ = 0, drops_ = 0;
};

}  // namespace tk::graph
