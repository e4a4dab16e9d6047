// The memory a training step will take, known before anything runs.
//
//   tk::MemoryPlan plan = model.memory_plan(128);
//   std::cout << plan.to_string();          // per-layer table and totals
//   if (plan.total > budget) ...           // "will it fit?" answered without a trial run
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

struct MemoryPlan {
  int64_t batch_size = 0;
  size_t weights = 0;
  size_t gradients = 0;  // part of `arena`
  size_t optimizer_state = 0;
  size_t arena = 0;             // planned peak of every transient buffer: inputs, activations, gradients
  size_t workspace = 0;         // scratch shared by all ops (im2col buffers, ...)
  size_t total = 0;             // weights + optimizer_state + arena + workspace: the step's peak
  size_t unshared = 0;          // what the transient buffers would take without the planner's reuse
  bool rematerialized = false;  // forward activations recomputed during backward
  int recomputed_ops = 0;
  double recompute_flops = 0;  // extra work per step
  double step_flops = 0;       // the step's work without rematerialization (≈ 3 × forward)
  std::vector<LayerMemory> layers;
  std::string to_string() const;
};

}  // namespace tk
