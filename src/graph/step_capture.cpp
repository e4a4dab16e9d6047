// StepCapture (step_capture.h): the capture state machine, host code every build compiles.
#include "graph/step_capture.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/settings.h"

namespace tk::graph {

std::string capture_off_reason(bool backend_has_graphs, bool graphs_env_on, bool profiling, bool has_collective) {
  if (!backend_has_graphs) return "the backend has no graphs";
  if (!graphs_env_on) return "TK_CUDA_GRAPHS=0";
  if (profiling) return "TK_PROFILE times each kernel with a synchronization, which a graph cannot do";
  if (has_collective) return "the program has collectives (all-reduce), which are not captured";
  return "";
}

bool cuda_graphs_enabled_by_env() { return runtime::setting_bool_or_default(runtime::Setting::cuda_graphs); }

namespace {
// FNV-1a over the bytes of each value.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  template <typename T>
  void add(const T& v) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  }
};
}  // namespace

uint64_t host_values_key(const std::vector<const UpdateConfig*>& configs, bool deterministic) {
  Hash h;
  h.add(deterministic);
  for (const UpdateConfig* c : configs) {
    // What the update and StepControl kernels take by value when queued (backends/cuda/cuda_kernels.cpp), and what
    // decides on the host which kernels launch (clipnorm > 0, loss scaling). learning_rate and iterations are step
    // scalars, read on the device.
    h.add(c->beta_1), h.add(c->beta_2), h.add(c->epsilon), h.add(c->momentum), h.add(c->nesterov), h.add(c->rho);
    h.add(c->centered), h.add(c->weight_decay), h.add(c->clipnorm), h.add(c->clipvalue), h.add(c->global_clipnorm);
    h.add(c->skip_nonfinite), h.add(c->loss_scale_initial), h.add(c->loss_scale_growth_steps);
  }
  return h.h;
}

// A number per thread, never reused (a std::thread::id may be reused by a thread started after another ended: that one
// has no library handles either).
uint64_t this_thread_key() {
  static std::atomic<uint64_t> next{1};
  thread_local const uint64_t key = next.fetch_add(1);
  return key;
}

StepCapture::StepCapture(std::string off_reason)
    : state_(off_reason.empty() ? State::cold : State::off), reason_(std::move(off_reason)) {}

StepCapture::Action StepCapture::next(const void* arena, const void* stream, const HostKey& key) {
  switch (state_) {
    case State::off:
    case State::failed:
      return Action::plain;
    case State::cold:
      key_ = key;
      return Action::plain;
    case State::warm:
      if (!(key == key_)) {  // warmed up on another thread or with other values: warm up again
        key_ = key;
        return Action::plain;
      }
      arena_ = arena;
      stream_ = stream;
      return Action::capture;
    case State::captured:
      if (!(key == key_)) {  // the graph froze other values, or this thread has no handles yet: drop, warm up again
        key_ = key;
        state_ = State::cold;
        ++drops_;
        return Action::drop;
      }
      if (arena != arena_ || stream != stream_) {  // a binding the graph was not captured for: capture again
        arena_ = arena;
        stream_ = stream;
        state_ = State::warm;
        return Action::capture;
      }
      ++replays_;
      return Action::replay;
  }
  return Action::plain;
}

void StepCapture::ran_plain() {
  if (state_ == State::cold) state_ = State::warm;
}

void StepCapture::captured() {
  state_ = State::captured;
  ++captures_;
  ++replays_;  // the capturing run launches the graph once
}

bool StepCapture::failed(const std::string& why) {
  const bool first = state_ != State::failed;
  state_ = State::failed;
  reason_ = why;
  return first;
}

bool StepCapture::invalidate() {
  if (state_ != State::captured) return false;
  state_ = State::warm;
  return true;
}

}  // namespace tk::graph
