// A compiled program: a scheduled graph, its memory plan, one arena on the program's device, and a flat
// list of kernel calls. run() allocates nothing: every pointer is resolved when the program is built.
// The program owns the host/device boundary: inputs are written only through an InputAccess (held by
// nn::BatchStager, the one way a host batch reaches a program), outputs are read through output_*(),
// which synchronize with the device first.
// On a device with streams (CUDA) a program runs, copies and synchronizes on its own stream (set_stream: the owner's
// compute stream, backends/cuda/compute_stream.h), and from its second run on replays its kernels as a captured
// CUDA Graph (graph/step_capture.h; TK_CUDA_GRAPHS=0 turns that off, TK_PROFILE does too).
//
//   tk::graph::Program p(std::move(g), /*outputs=*/{loss, acc}, /*sinks=*/updates, tk::Device::cpu());
//   // a BatchStager writes the inputs ...
//   p.run(ctx);                         // may return before an asynchronous device finishes
//   float loss_value = p.output_scalar(loss);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/backend.h"
#include "graph/kernel.h"
#include "graph/schedule.h"
#include "graph/step_capture.h"

namespace tk::nn {
class BatchStager;
}

namespace tk::graph {

class Program;

// Where one program input lives: device memory of `shape` and `dtype`. Handed out only by InputAccess.
struct InputSlot {
  void* data;
  const Shape& shape;
  DType dtype;
  Device device;
};

// The key to a program's inputs. Only nn::BatchStager can make one: no other code writes program inputs.
class InputAccess {
 public:
  InputSlot slot(Program& p, int value) const;

 private:
  InputAccess() = default;
  friend class tk::nn::BatchStager;
};

class Program {
 public:
  // `outputs` stay readable after run(); `sinks` are output-less ops to run (optimizer updates).
  // `owner` tags the arena in the device's memory statistics ("sequential: train program, batch 128").
  // With own_arena false the program allocates nothing: the caller binds an arena (bind_arena) of at
  // least arena_bytes_required() bytes on the program's device, which programs that never run at the
  // same time can share. Throws Unsupported when the device lacks a kernel for some (op, dtypes).
  Program(Graph g, std::vector<int> outputs, std::vector<int> sinks, Device device,
          const std::string& owner = "program arena", bool own_arena = true);
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Queues every kernel on ctx's device (ctx.device must be the program's), on the program's stream when it has one
  // (ctx.stream otherwise).
  void run(const ExecContext& ctx);
  // Waits for the device (a no-op on the CPU).
  void synchronize() const;
  // The stream every run, copy and read of this program uses (a cudaStream_t; null: the legacy default stream, and
  // always on the CPU). Another stream invalidates a captured graph.
  void set_stream(void* stream);
  void* stream() const { return stream_; }
  // Queues a copy of an output's bytes to host memory on the program's stream without waiting (CUDA: host_dst must be
  // pinned; read it after an event recorded on the stream or a synchronize). Synchronous on the CPU.
  void copy_output_async(int value, void* host_dst, size_t bytes) const;
  // The CUDA Graph state of this program (graph/step_capture.h), for tests and logs.
  const StepCapture& capture() const { return capture_; }
  // Replaces the backend's step launcher (tests give a CPU program a fake one to drive the capture state machine);
  // the capture state starts over (cold), unless capture is off for another reason.
  void set_step_launcher(std::unique_ptr<StepLauncher> launcher);

  // Program outputs (values in `outputs`) read back to the host; each synchronizes first.
  float output_scalar(int value) const;                             // a one-element floating output, as float
  void read_output(int value, void* host_dst, size_t bytes) const;  // raw bytes in the value's dtype
  Tensor output(int value) const;                                   // a host copy (allocates)

  Device device() const { return device_; }
  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  const std::vector<int>& order() const { return order_; }
  size_t arena_bytes() const { return plan_.arena_bytes; }  // transient values (workspace not included)
  size_t arena_bytes_required() const;                      // arena + workspace
  void bind_arena(Tensor arena);                            // an empty Tensor unbinds

  // Per-op wall time, on when TK_PROFILE=1 is set in the environment (or enabled here). The report lists
  // ops by total time; it is printed to stderr when the program is destroyed if TK_PROFILE was set.
  void enable_profiling(bool on) { profiling_ = on; }
  std::string profile_report(size_t top = 15) const;
  ~Program();

 private:
  friend class InputAccess;
  struct Step {
    KernelFn fn;
    int node;
    void* out;
    size_t in_begin;  // into in_ptrs_ and in_dtypes_
    int side = -1;    // the BiasGrad this kernel also writes (attrs.side_output), or -1
    void* side_out = nullptr;
    Collective* poll = nullptr;  // an overlapping all-reduce is in flight after this step: let it progress
  };
  void* storage(int value) const;  // device address of a value
  const void* readable(int value, size_t bytes) const;
  void run_steps(const ExecContext& ctx, void* workspace, const StepScalars* scalars);
  void run_captured(const ExecContext& ctx, void* workspace, const StepScalars* scalars);
  ExecContext own_context() const;  // device and stream, for copies and synchronization
  Graph g_;
  Device device_;
  Backend* backend_;
  std::vector<int> order_;
  std::vector<int> outputs_;
  MemoryPlan plan_;
  Tensor arena_;  // (arena_bytes + workspace_bytes) bytes from the device budget
  std::vector<Step> steps_;
  std::vector<const void*> in_ptrs_;
  std::vector<DType> in_dtypes_;
  bool profiling_ = false, print_profile_ = false;
  std::vector<double> step_seconds_;  // per entry of steps_
  int64_t runs_ = 0;
  void* stream_ = nullptr;
  std::unique_ptr<StepLauncher> launcher_;  // the backend's (null on the CPU)
  bool has_collective_ = false;
  std::vector<const UpdateConfig*> update_configs_;  // of its update ops: their host values are part of the host key
  StepCapture capture_{""};
};

}  // namespace tk::graph
