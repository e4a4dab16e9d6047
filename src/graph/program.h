// A compiled program: a scheduled graph, its memory plan, one arena, and a flat list of kernel calls.
// run() allocates nothing: every pointer is resolved when the program is built.
//
//   tk::graph::Program p(std::move(g), /*outputs=*/{loss, acc}, /*sinks=*/updates);
//   std::memcpy(p.data(x_id), batch, bytes);   // inputs live in the arena
//   p.run(ctx);
//   float loss_value = *p.data_f(loss);
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "graph/kernel.h"
#include "graph/schedule.h"

namespace tk::graph {

class Program {
 public:
  // `outputs` stay readable after run(); `sinks` are output-less ops to run (optimizer updates).
  // `owner` tags the arena in the device's memory statistics ("sequential: train program, batch 128").
  // With own_arena false the program allocates nothing: the caller binds an arena (bind_arena) of at
  // least arena_bytes_required() bytes, which programs that never run at the same time can share.
  Program(Graph g, std::vector<int> outputs, std::vector<int> sinks = {}, Device device = Device::cpu(),
          const std::string& owner = "program arena", bool own_arena = true);
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  void run(const ExecContext& ctx);

  void* data(int value);
  float* data_f(int value) { return static_cast<float*>(data(value)); }
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
  struct Step {
    KernelFn fn;
    int node;
    void* out;
    size_t in_begin;  // into in_ptrs_
  };
  Graph g_;
  std::vector<int> order_;
  MemoryPlan plan_;
  Tensor arena_;  // (arena_bytes + workspace_bytes) bytes from the device budget
  std::vector<Step> steps_;
  std::vector<const void*> in_ptrs_;
  bool profiling_ = false, print_profile_ = false;
  std::vector<double> step_seconds_;  // per entry of steps_
  int64_t runs_ = 0;
};

}  // namespace tk::graph
