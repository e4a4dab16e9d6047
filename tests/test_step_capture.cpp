// CUDA Graph capture bookkeeping on the CPU (issue 13): graph::StepCapture's state machine, and graph::Program driving
// it through a fake StepLauncher (the CPU backend has none, so a CPU program is given one): a plain warm-up run, one
// capture, then replays; a failed capture logged once and never retried; a new arena or stream captures again; another
// host key (the optimizer's hyperparameters, op determinism, the thread) drops the graph and warms up again; every run
// is exactly one step (a fake that records instead of running while capturing); TK_CUDA_GRAPHS=0, TK_PROFILE and
// collectives keep capture off. The CUDA calls themselves: CudaGraphs.* (GPU only).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "graph/program.h"
#include "graph/step_capture.h"
#include "trainkit/runtime/determinism.h"
#include "trainkit/trainkit.h"

namespace {
using tk::Tensor;
using tk::graph::StepCapture;
using Action = StepCapture::Action;
using State = StepCapture::State;

TEST(StepCapture, WarmsUpCapturesOnceThenReplays) {
  StepCapture c("");
  int arena = 0, stream = 0;
  EXPECT_EQ(c.state(), State::cold);
  EXPECT_EQ(c.next(&arena, &stream), Action::plain);
  c.ran_plain();
  EXPECT_EQ(c.state(), State::warm);
  EXPECT_EQ(c.next(&arena, &stream), Action::capture);
  c.captured();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.next(&arena, &stream), Action::replay);
  EXPECT_EQ(c.captures(), 1);
  EXPECT_EQ(c.replays(), 4);  // the capturing run launches the graph too
}

TEST(StepCapture, AFailureIsKeptAndNeverRetried) {
  StepCapture c("");
  int arena = 0;
  c.next(&arena, nullptr);
  c.ran_plain();
  ASSERT_EQ(c.next(&arena, nullptr), Action::capture);
  EXPECT_TRUE(c.failed("operation not permitted when stream is capturing"));
  EXPECT_EQ(c.state(), State::failed);
  EXPECT_EQ(c.reason(), "operation not permitted when stream is capturing");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.next(&arena, nullptr), Action::plain);
    c.ran_plain();
  }
  EXPECT_FALSE(c.failed("again")) << "logged once";
  EXPECT_FALSE(c.invalidate()) << "a failed program is never captured again, whatever changes";
  EXPECT_EQ(c.next(&arena, nullptr), Action::plain);
}

TEST(StepCapture, ANewBindingCapturesAgain) {
  StepCapture c("");
  int a1 = 0, a2 = 0, s1 = 0, s2 = 0;
  c.next(&a1, &s1);
  c.ran_plain();
  c.next(&a1, &s1);
  c.captured();
  EXPECT_TRUE(c.invalidate());  // bind_arena
  EXPECT_EQ(c.state(), State::warm);
  EXPECT_EQ(c.next(&a2, &s1), Action::capture);
  c.captured();
  EXPECT_EQ(c.next(&a2, &s1), Action::replay);
  EXPECT_EQ(c.next(&a2, &s2), Action::capture) << "a stream it was not captured on";
  c.captured();
  EXPECT_EQ(c.captures(), 3);
}

TEST(StepCapture, AnotherHostKeyWarmsUpAgain) {
  using tk::graph::HostKey;
  StepCapture c("");
  int arena = 0, stream = 0;
  const HostKey k1{1, 7}, k2{2, 7}, other_thread{1, 8};
  EXPECT_EQ(c.next(&arena, &stream, k1), Action::plain);
  c.ran_plain();
  EXPECT_EQ(c.next(&arena, &stream, k2), Action::plain) << "warmed up with other values";
  c.ran_plain();
  EXPECT_EQ(c.next(&arena, &stream, k2), Action::capture);
  c.captured();
  EXPECT_EQ(c.next(&arena, &stream, k2), Action::replay);
  EXPECT_EQ(c.next(&arena, &stream, k1), Action::drop) << "the graph froze k2's values";
  EXPECT_EQ(c.state(), State::cold);
  c.ran_plain();
  EXPECT_EQ(c.next(&arena, &stream, k1), Action::capture);
  c.captured();
  EXPECT_EQ(c.next(&arena, &stream, other_thread), Action::drop) << "another thread";
  c.ran_plain();
  EXPECT_EQ(c.next(&arena, &stream, other_thread), Action::capture);
  EXPECT_EQ(c.drops(), 2);
  EXPECT_NE(tk::graph::host_values_key({}, true), tk::graph::host_values_key({}, false));
  tk::graph::UpdateConfig a, b;
  b.momentum = 0.9f;
  EXPECT_NE(tk::graph::host_values_key({&a}, false), tk::graph::host_values_key({&b}, false));
  b = a;
  b.iterations = 100;
  b.learning_rate = 0.5f;
  EXPECT_EQ(tk::graph::host_values_key({&a}, false), tk::graph::host_values_key({&b}, false)) << "step scalars";
}

TEST(StepCapture, OffReasons) {
  EXPECT_EQ(tk::graph::capture_off_reason(true, true, false, false), "");
  EXPECT_NE(tk::graph::capture_off_reason(false, true, false, false), "");
  EXPECT_EQ(tk::graph::capture_off_reason(true, false, false, false), "TK_CUDA_GRAPHS=0");
  EXPECT_NE(tk::graph::capture_off_reason(true, true, true, false).find("TK_PROFILE"), std::string::npos);
  EXPECT_NE(tk::graph::capture_off_reason(true, true, false, true).find("collectives"), std::string::npos);
  StepCapture off("TK_CUDA_GRAPHS=0");
  EXPECT_EQ(off.state(), State::off);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(off.next(nullptr, nullptr), Action::plain);
    off.ran_plain();
  }
  EXPECT_EQ(off.state(), State::off);
}

// Records what Program asks of the device; the "device" is the CPU, so kernels run when launched, captured or not.
struct FakeLauncher : tk::graph::StepLauncher {
  struct Counts {
    int uploads = 0, begins = 0, ends = 0, aborts = 0, launches = 0, resets = 0;
  };
  Counts* n;
  std::string fail_end;  // end_capture throws this when set
  FakeLauncher(Counts* counts, std::string fail = "") : n(counts), fail_end(std::move(fail)) {}
  void upload_scalars(void* dst, const void* host, size_t bytes, void*) override {
    ++n->uploads;
    std::memcpy(dst, host, bytes);
  }
  void begin_capture(void*) override { ++n->begins; }
  void end_capture(void*) override {
    ++n->ends;
    if (!fail_end.empty()) throw tk::Error(fail_end);
  }
  void abort_capture(void*) noexcept override { ++n->aborts; }
  void launch(void*) override { ++n->launches; }
  void reset() noexcept override { ++n->resets; }
};

struct Tiny {
  Tensor a = Tensor::full({4}, 2.0f), b = Tensor::full({4}, 3.0f);
  int out = -1;
  int stream = 0;  // a stand-in for a stream of its own (the legacy default stream, null, is never captured)
  std::unique_ptr<tk::graph::Program> program() {
    tk::graph::Graph g;
    const int va = g.variable("a", a), vb = g.variable("b", b);
    out = g.add(tk::graph::Op::Mul, {va, vb});
    auto p = std::make_unique<tk::graph::Program>(std::move(g), std::vector<int>{out}, std::vector<int>{},
                                                  tk::Device::cpu());
    p->set_stream(&stream);
    return p;
  }
};

TEST(StepCapture, ProgramWarmsUpCapturesAndReplays) {
  Tiny t;
  auto p = t.program();
  EXPECT_EQ(p->capture().state(), State::off) << "the CPU backend has no graphs";
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<FakeLauncher>(&n));
  ASSERT_EQ(p->capture().state(), State::cold);
  tk::graph::ExecContext ctx;
  p->run(ctx);  // warm-up
  EXPECT_EQ(p->capture().state(), State::warm);
  EXPECT_EQ(p->output(t.out).data<float>()[0], 6.0f);
  p->run(ctx);  // captured, then launched
  EXPECT_EQ(p->capture().state(), State::captured);
  EXPECT_EQ(n.begins, 1);
  EXPECT_EQ(n.ends, 1);
  EXPECT_EQ(n.launches, 1);
  for (int i = 0; i < 3; ++i) p->run(ctx);
  EXPECT_EQ(n.begins, 1) << "captured once";
  EXPECT_EQ(n.launches, 4);
  EXPECT_EQ(n.uploads, 5) << "the step's scalars are uploaded before every run, outside the graph";
  // A new arena: the graph holds the old addresses, so it is dropped and captured again at the next run.
  p->bind_arena(Tensor(tk::Shape{static_cast<int64_t>(p->arena_bytes_required())}, tk::DType::u8));
  EXPECT_EQ(p->capture().state(), State::warm);
  EXPECT_GE(n.resets, 1);
  p->run(ctx);
  EXPECT_EQ(n.begins, 2);
  EXPECT_EQ(p->capture().captures(), 2);
}

// A stand-in for a device that really captures: what runs between begin_capture and end_capture is recorded, not done.
// The program's only state is an SGD update's variable (w -= learning_rate * gradient, a constant gradient), so a
// step's effect is a constant delta: end_capture keeps the delta the capturing run made and undoes it (the step did
// not happen), launch() applies it (the graph runs the step). A failing begin_capture or end_capture leaves nothing
// done either. A step lost (no launch after the capture, no plain rerun after a failed one) or done twice changes w.
struct RecordingLauncher : tk::graph::StepLauncher {
  FakeLauncher::Counts* n;
  Tensor* w;  // the variable the program's update writes
  std::string fail_begin, fail_end;
  std::vector<float> before, delta;
  bool capturing = false;
  RecordingLauncher(FakeLauncher::Counts* counts, Tensor* var) : n(counts), w(var) {}
  float* data() { return w->data<float>(); }
  void upload_scalars(void* dst, const void* host, size_t bytes, void*) override {
    ++n->uploads;
    std::memcpy(dst, host, bytes);
  }
  void begin_capture(void*) override {
    ++n->begins;
    if (!fail_begin.empty()) throw tk::Error(fail_begin);  // nothing is captured, nothing ran
    before.assign(data(), data() + w->numel());
    capturing = true;
  }
  void end_capture(void*) override {
    ++n->ends;
    capturing = false;
    delta.assign(before.size(), 0.0f);
    for (size_t i = 0; i < before.size(); ++i) delta[i] = data()[i] - before[i], data()[i] = before[i];  // recorded
    if (!fail_end.empty()) {
      delta.clear();
      throw tk::Error(fail_end);
    }
  }
  void abort_capture(void*) noexcept override {
    ++n->aborts;
    if (capturing)
      for (size_t i = 0; i < before.size(); ++i) data()[i] = before[i];
    capturing = false;
  }
  void launch(void*) override {
    ++n->launches;
    ASSERT_EQ(delta.size(), static_cast<size_t>(w->numel())) << "a graph launched that was never captured";
    for (size_t i = 0; i < delta.size(); ++i) data()[i] += delta[i];
  }
  void reset() noexcept override {
    ++n->resets;
    delta.clear();
  }
};

// A program that counts its runs: w -= learning_rate * g with g = 1 and learning_rate 1 (SGD, no momentum) makes
// w = -(steps run); clipvalue c < 1 makes each step -c.
struct Counter {
  Tensor w = Tensor::full({4}, 0.0f), g = Tensor::full({4}, 1.0f);  // SGD without momentum: no slot
  tk::graph::UpdateConfig config;
  int stream = 0;
  std::unique_ptr<tk::graph::Program> program() {
    tk::graph::Graph gr;
    const int vw = gr.variable("w", w), vg = gr.variable("g", g);
    tk::graph::Attrs at;
    at.update = &config;
    const int update = gr.add(tk::graph::Op::SgdUpdate, {vw, vg}, at, "update");
    auto p = std::make_unique<tk::graph::Program>(std::move(gr), std::vector<int>{}, std::vector<int>{update},
                                                  tk::Device::cpu());
    p->set_stream(&stream);
    return p;
  }
  float value() { return w.data<float>()[0]; }
  static tk::graph::ExecContext context() {
    tk::graph::ExecContext ctx;
    ctx.training = true;
    ctx.scalars.learning_rate = 1.0f;
    return ctx;
  }
};

TEST(StepCapture, EveryRunIsOneStepWarmUpCaptureAndReplay) {
  Counter t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<RecordingLauncher>(&n, &t.w));
  const tk::graph::ExecContext ctx = Counter::context();
  for (int run = 1; run <= 5; ++run) {
    p->run(ctx);
    EXPECT_EQ(t.value(), -static_cast<float>(run)) << "run " << run << " (" << n.launches << " launches)";
  }
  EXPECT_EQ(p->capture().state(), State::captured);
  EXPECT_EQ(n.begins, 1);
  EXPECT_EQ(n.launches, 4) << "the capturing run and three replays";
}

void expect_failed_capture_still_steps(bool fail_begin) {
  Counter t;
  auto p = t.program();
  FakeLauncher::Counts n;
  auto launcher = std::make_unique<RecordingLauncher>(&n, &t.w);
  (fail_begin ? launcher->fail_begin : launcher->fail_end) = "cudaStreamEndCapture failed: operation not permitted";
  p->set_step_launcher(std::move(launcher));
  const tk::graph::ExecContext ctx = Counter::context();
  p->run(ctx);  // warm-up
  EXPECT_EQ(t.value(), -1.0f);
  ::testing::internal::CaptureStderr();
  for (int run = 2; run <= 4; ++run) {
    p->run(ctx);  // the capture fails: the step must still run, plainly, once
    EXPECT_EQ(t.value(), -static_cast<float>(run)) << "run " << run;
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p->capture().state(), State::failed);
  EXPECT_NE(err.find("CUDA Graph capture"), std::string::npos) << err;
  EXPECT_NE(err.find("operation not permitted"), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA Graph capture"), err.rfind("CUDA Graph capture")) << "logged once: " << err;
  EXPECT_EQ(n.begins, 1) << "never retried";
  EXPECT_EQ(n.launches, 0);
}

TEST(StepCapture, AFailedCaptureIsLoggedOnceAndTheStepStillRuns) {
  expect_failed_capture_still_steps(false);  // end_capture (or instantiation) fails
  expect_failed_capture_still_steps(true);   // begin_capture fails
}

// The update kernels take the optimizer's hyperparameters by value when queued, so a graph freezes them: a change
// through Optimizer::config() (a callback) drops the graph; the next run is plain with the new values, then one
// capture with them.
TEST(StepCapture, AnotherOptimizerConfigDropsTheGraph) {
  Counter t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<RecordingLauncher>(&n, &t.w));
  const tk::graph::ExecContext ctx = Counter::context();
  for (int run = 0; run < 3; ++run) p->run(ctx);  // warm-up, capture, replay
  ASSERT_EQ(p->capture().state(), State::captured);
  ASSERT_EQ(t.value(), -3.0f);
  t.config.clipvalue = 0.5f;  // each step now moves w by 0.5; a frozen graph would still move it by 1
  p->run(ctx);
  EXPECT_EQ(t.value(), -3.5f);
  EXPECT_EQ(p->capture().drops(), 1);
  EXPECT_EQ(n.resets, 1);
  EXPECT_EQ(p->capture().state(), State::warm);
  p->run(ctx);  // captured with the new values
  EXPECT_EQ(t.value(), -4.0f);
  EXPECT_EQ(p->capture().captures(), 2);
  p->run(ctx);
  EXPECT_EQ(t.value(), -4.5f);
  t.config.iterations += 1;  // a step scalar (read on the device): the graph stays
  t.config.learning_rate = 0.25f;
  p->run(ctx);
  EXPECT_EQ(p->capture().drops(), 1);
  EXPECT_EQ(p->capture().state(), State::captured);
}

// Op determinism picks other GEMM/convolution algorithms when the kernels are queued: toggling it drops the graph.
TEST(StepCapture, TogglingOpDeterminismDropsTheGraph) {
  Counter t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<RecordingLauncher>(&n, &t.w));
  const tk::graph::ExecContext ctx = Counter::context();
  for (int run = 0; run < 2; ++run) p->run(ctx);
  ASSERT_EQ(p->capture().state(), State::captured);
  const bool was = tk::config::is_op_determinism_enabled();
  if (was)
    tk::config::disable_op_determinism();
  else
    tk::config::enable_op_determinism();
  p->run(ctx);
  if (was)
    tk::config::enable_op_determinism();
  else
    tk::config::disable_op_determinism();
  EXPECT_EQ(p->capture().drops(), 1);
  EXPECT_EQ(t.value(), -3.0f);
}

// cuBLASLt and cuDNN handles and plans are per thread: a program warmed up on one thread is cold on another (a capture
// there would create them inside the capture, and fail for good).
TEST(StepCapture, AnotherThreadWarmsUpAgain) {
  Counter t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<RecordingLauncher>(&n, &t.w));
  const tk::graph::ExecContext ctx = Counter::context();
  p->run(ctx);  // warm-up here
  std::thread([&] {
    p->run(ctx);  // cold on this thread: plain, not a capture
    EXPECT_EQ(n.begins, 0);
    EXPECT_EQ(p->capture().state(), State::warm);
    p->run(ctx);  // warmed up here: captured
    EXPECT_EQ(n.begins, 1);
  }).join();
  EXPECT_EQ(p->capture().state(), State::captured);
  p->run(ctx);  // back on the first thread: drop, warm up again
  EXPECT_EQ(p->capture().drops(), 1);
  EXPECT_EQ(t.value(), -4.0f);
}

TEST(StepCapture, TheLegacyDefaultStreamIsNeverCaptured) {
  Tiny t;
  auto p = t.program();
  p->set_stream(nullptr);
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<FakeLauncher>(&n));
  tk::graph::ExecContext ctx;
  for (int i = 0; i < 3; ++i) p->run(ctx);
  EXPECT_EQ(n.begins, 0);
  EXPECT_EQ(n.uploads, 3);
  EXPECT_EQ(p->capture().state(), State::cold);
}

TEST(StepCapture, SwitchedOffByTheEnvironment) {
  ::setenv("TK_CUDA_GRAPHS", "0", 1);
  Tiny t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<FakeLauncher>(&n));
  ::unsetenv("TK_CUDA_GRAPHS");
  EXPECT_EQ(p->capture().state(), State::off);
  EXPECT_EQ(p->capture().reason(), "TK_CUDA_GRAPHS=0");
  tk::graph::ExecContext ctx;
  for (int i = 0; i < 3; ++i) p->run(ctx);
  EXPECT_EQ(n.begins, 0);
  EXPECT_EQ(n.launches, 0);
  EXPECT_EQ(n.uploads, 3);
  EXPECT_EQ(p->output(t.out).data<float>()[0], 6.0f);
}

TEST(StepCapture, ProfilingKeepsCaptureOff) {
  Tiny t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<FakeLauncher>(&n));
  p->enable_profiling(true);
  tk::graph::ExecContext ctx;
  for (int i = 0; i < 3; ++i) p->run(ctx);
  EXPECT_EQ(p->capture().state(), State::off);
  EXPECT_NE(p->capture().reason().find("TK_PROFILE"), std::string::npos);
  EXPECT_EQ(n.begins, 0);
}

}  // namespace
