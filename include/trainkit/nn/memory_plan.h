// The memory a training step will take, known before anything runs.
//
//   tk::MemoryPlan plan = model.memory_plan(128);
//   std::cout << plan.to_string();          // per-layer table and totals
//   if (plan.total > budget) ...           // "will it fit?" answered without a trial run
//   tk::io::write_file_atomic("plan.svg", plan.svg());   // every planned value as a box: offset x lifetime
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tk {

struct LayerMemory {
  std::string layer;
  size_t weights = 0;          // persistent
  size_t gradients = 0;        // gradient buffers of its trainable weights (in the arena, freed after the update)
  size_t optimizer_state = 0;  // persistent optimizer slots
  size_t activations = 0;      // its forward outputs (in the arena; they share memory where lifetimes allow)
};

// One value the planner placed in the arena: its bytes at `offset`, alive from step `first` (the program
// step producing it; -1 for inputs written before step 0) to step `last` (its last reader).
struct PlannedValue {
  std::string name;   // the program's node name, e.g. "dense_1/MatMul" or "dense_1/MatMul/grad"
  std::string layer;  // the layer it belongs to; "" for the loss and the step's own values
  std::string kind;   // "input", "activation" or "gradient"
  size_t offset = 0, bytes = 0;
  int first = 0, last = 0;
};

struct MemoryPlan {
  int64_t batch_size = 0;
  size_t weights = 0;
  size_t gradients = 0;  // part of `arena`
  size_t optimizer_state = 0;
  size_t arena = 0;      // planned peak of every transient buffer: inputs, activations, gradients
  size_t workspace = 0;  // scratch shared by all ops (im2col buffers, ...)
  size_t total = 0;      // weights + optimizer_state + arena + workspace: the step's peak
  // The largest buffer a save or load of this model holds (a checkpoint, a backup, --save), in host memory: a save
  // writes each tensor from its own memory, so 0 on the cpu; a GPU's optimizer slots pass through one bounded
  // staging buffer (io/file_staging.h). Not in `total` (which is the device's): the host holds it.
  size_t file_staging = 0;
  size_t unshared = 0;          // what the transient buffers would take without the planner's reuse
  bool rematerialized = false;  // forward activations recomputed during backward
  int recomputed_ops = 0;
  double recompute_flops = 0;            // extra work per step
  double step_flops = 0;                 // the step's work without rematerialization (≈ 3 × forward)
  std::string dtype_policy = "float32";  // the model's (trainkit/nn/mixed_precision.h)
  // The same step under the other policy: float32 for a mixed model, mixed_bfloat16 for a float32 one (what
  // switching would save or cost). Filled in by Model::memory_plan; 0 when not computed.
  std::string alternative_policy;
  size_t alternative_total = 0;
  std::vector<LayerMemory> layers;
  std::vector<PlannedValue> values;  // every value in the arena, in program order of production
  int steps = 0;                     // the program's length; values live within [-1, steps]
  std::string to_string() const;
  // An SVG picture of the plan (as PyTorch's memory visualizer draws an allocator trace): program steps
  // across, bytes up; weights and optimizer slots as bands at the bottom, each planned value as a box at its
  // arena offset over its lifetime colored by layer, the workspace band on top, the peak marked.
  std::string svg() const;
};

}  // namespace tk
