// CUDA Graph capture bookkeeping on the CPU (issue 13): graph::StepCapture's state machine, and graph::Program driving
// it through a fake StepLauncher (the CPU backend has none, so a CPU program is given one): a plain warm-up run, one
// capture, then replays; a failed capture logged once and never retried; a new arena or stream captures again;
// TK_CUDA_GRAPHS=0, TK_PROFILE and collectives keep capture off. The CUDA calls themselves: CudaGraphs.* (GPU only).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "graph/program.h"
#include "graph/step_capture.h"
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

TEST(StepCapture, AFailedCaptureIsLoggedOnceAndTheStepStillRuns) {
  Tiny t;
  auto p = t.program();
  FakeLauncher::Counts n;
  p->set_step_launcher(std::make_unique<FakeLauncher>(&n, "cudaStreamEndCapture failed: operation not permitted"));
  tk::graph::ExecContext ctx;
  p->run(ctx);
  t.a.data<float>()[0] = 5.0f;  // the failing run must still compute the step (plainly)
  ::testing::internal::CaptureStderr();
  p->run(ctx);
  p->run(ctx);
  p->run(ctx);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(p->capture().state(), State::failed);
  EXPECT_NE(err.find("CUDA Graph capture"), std::string::npos) << err;
  EXPECT_NE(err.find("operation not permitted"), std::string::npos) << err;
  EXPECT_EQ(err.find("CUDA Graph capture"), err.rfind("CUDA Graph capture")) << "logged once: " << err;
  EXPECT_EQ(n.begins, 1) << "never retried";
  EXPECT_EQ(n.launches, 0);
  EXPECT_EQ(p->output(t.out).data<float>()[0], 15.0f);
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
