// Scheduling and static memory planning of a program.
//
//   auto order = tk::graph::schedule(g, roots);            // only what the roots need, topological
//   auto plan  = tk::graph::plan_memory(g, order, keep, tk::Device::cpu());   // offsets in one arena
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "trainkit/core/device.h"

namespace tk::graph {

// Nodes needed by `roots`, in an executable order. Update ops (no output) run as early as possible:
// right after their last input is ready and after every other reader of the variables they overwrite,
// so each gradient buffer dies as soon as it has been applied.
std::vector<int> schedule(const Graph& g, const std::vector<int>& roots);
// Per node id: 1 when `roots` need it (the roots and everything they read, transitively), else 0.
std::vector<char> needed_by(const Graph& g, const std::vector<int>& roots);

// A BiasGrad that its input's kernel writes as a second output (the fusion pass's, graph/fuse.h): it runs no
// kernel, and its storage is written when its input is, so it lives from that step on.
inline bool is_side_output(const Graph& g, int id) { return g[id].op == Op::BiasGrad && g[id].attrs.side_output; }

inline constexpr size_t kArenaAlignment = 64;

// Views (Op::View) and AllReduceWaits take no arena space of their own: their offset is inside the value they read
// (at attrs.begin for a View, at 0 for a wait), which lives as long as any reader of theirs. Views run no kernel.
inline bool is_alias(const Graph& g, int id) { return g[id].op == Op::View || g[id].op == Op::AllReduceWait; }
inline int64_t alias_begin(const Graph& g, int id) { return g[id].op == Op::View ? g[id].attrs.begin : 0; }

struct MemoryPlan {
  std::vector<int64_t> offset;  // per node id: byte offset in the arena, -1 if not in the arena
  std::vector<int> first_use;   // per node id: step index that produces it
  std::vector<int> last_use;    // per node id: last step index that reads it
  size_t arena_bytes = 0;       // the planned peak of transient memory
  size_t unplanned_bytes = 0;   // the sum of all transient buffers (what a naive allocator would hold)
  size_t workspace_bytes = 0;   // after the arena: scratch shared by all ops (the largest any op needs), then
                                // the step's scalars (kStepScalarsBytes)
};

// Assigns every transient value (everything except Variable and output-less ops) an arena offset such
// that values alive at the same time never overlap ("greedy by size", as in TFLite's arena planner).
// Values in `keep` (program outputs, inputs) stay alive until the end. Every value is sized by its dtype;
// the workspace is the largest any op needs on `device`, as its backend says.
MemoryPlan plan_memory(const Graph& g, const std::vector<int>& order, const std::vector<int>& keep, Device device);

}  // namespace tk::graph
