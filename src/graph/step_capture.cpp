// StepCapture (step_capture.h): the capture state machine, host code every build compiles.
#include "graph/step_capture.h"

#include <cstdlib>

namespace tk::graph {

std::string capture_off_reason(bool backend_has_graphs, bool graphs_env_on, bool profiling, bool has_collective) {
  if (!backend_has_graphs) return "the backend has no graphs";
  if (!graphs_env_on) return "TK_CUDA_GRAPHS=0";
  if (profiling) return "TK_PROFILE times each kernel with a synchronization, which a graph cannot do";
  if (has_collective) return "the program has collectives (all-reduce), which are not captured";
  return "";
}

bool cuda_graphs_enabled_by_env() {
  const char* env = std::getenv("TK_CUDA_GRAPHS");
  return !(env && env[0] == '0' && env[1] == '\0');
}

StepCapture::StepCapture(std::string off_reason)
    : state_(off_reason.empty() ? State::cold : State::off), reason_(std::move(off_reason)) {}

StepCapture::Action StepCapture::next(const void* arena, const void* stream) {
  switch (state_) {
    case State::off:
    case State::failed:
    case State::cold:
      return Action::plain;
    case State::warm:
      arena_ = arena;
      stream_ = stream;
      return Action::capture;
    case State::captured:
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

const char* capture_state_name(StepCapture::State s) {
  switch (s) {
    case StepCapture::State::off:
      return "off";
    case StepCapture::State::cold:
      return "cold";
    case StepCapture::State::warm:
      return "warm";
    case StepCapture::State::captured:
      return "captured";
    case StepCapture::State::failed:
      return "failed";
  }
  return "?";
}

}  // namespace tk::graph
