// A traced training program's memory plan, attributed to layers (plan_from_trace), and its report
// (MemoryPlan::to_string).
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "core/device_bytes.h"
#include "graph/autodiff.h"
#include "graph/schedule.h"
#include "io/file_staging.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "nn/optimizer_rule.h"
#include "runtime/device_memory.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk {
namespace {

std::string layer_of(const std::string& node_name) { return node_name.substr(0, node_name.find('/')); }

}  // namespace

namespace nn {
MemoryPlan plan_from_trace(const ProgramCache::Traced& t, const std::vector<LayerPtr>& layers, Device device,
                           int64_t batch_size, bool remat, const graph::RematStats& stats) {
  std::vector<int> roots = t.keep;
  roots.insert(roots.end(), t.sinks.begin(), t.sinks.end());
  const std::vector<int> order = graph::schedule(t.g, roots);
  std::vector<int> keep = t.keep;
  for (int id : order)
    if (t.g[id].op == graph::Op::Input) keep.push_back(id);
  const graph::MemoryPlan mp = graph::plan_memory(t.g, order, keep, device);

  MemoryPlan plan;
  plan.batch_size = batch_size;
  plan.arena =
      allocated_bytes(std::max(mp.arena_bytes + mp.workspace_bytes, graph::kArenaAlignment)) - mp.workspace_bytes;
  plan.workspace = mp.workspace_bytes;
  plan.unshared = mp.unplanned_bytes;
  std::map<std::string, size_t> index;
  for (const LayerPtr& l : layers) {
    index[l->name] = plan.layers.size();
    LayerMemory lm{l->name};
    for (const Weight& w : l->weights()) lm.weights += allocated_bytes(w.value.nbytes());
    plan.layers.push_back(lm);
    plan.weights += lm.weights;
  }
  std::set<std::string> weight_names;
  for (const LayerPtr& l : layers)
    for (const Weight& w : l->weights()) weight_names.insert(w.name);
  // Optimizer slots and gradients: from the update ops (param, grad, slots...).
  for (int id : order) {
    const graph::Node& n = t.g[id];
    const bool update = nn::is_fused_update(n.op);  // the optimizer rules' fused ops (nn/optimizer_rule.h)
    if (update) {  // one variable, or MultiUpdate's attrs.size of them: (params, grads, slots per variable)
      const size_t vars = n.op == graph::Op::MultiUpdate ? static_cast<size_t>(n.attrs.size) : 1;
      const size_t per_var_slots = (n.inputs.size() - (n.attrs.gated ? 1 : 0)) / vars - 2;
      for (size_t v = 0; v < vars; ++v) {
        const graph::Node& param = t.g[n.inputs[v]];
        auto it = index.find(layer_of(param.name));
        const size_t bytes = static_cast<size_t>(param.shape.numel()) * dtype_size(param.dtype);
        const size_t slots = per_var_slots * allocated_bytes(bytes);
        plan.optimizer_state += slots;
        plan.gradients += bytes;
        if (it != index.end())
          plan.layers[it->second].optimizer_state += slots, plan.layers[it->second].gradients += bytes;
      }
    } else if (n.op == graph::Op::Assign) {  // an optimizer rule's (nn/optimizer_rule.h): a slot, or the weight
      const graph::Node& dst = t.g[n.inputs[0]];
      const size_t bytes = static_cast<size_t>(dst.shape.numel()) * dtype_size(dst.dtype);
      auto it = index.find(layer_of(dst.name));
      // ProgramCache::add_update's slot names, and the rule's optimizer variables ("optimizer/u_product")
      const bool slot = dst.name.find("/slot") != std::string::npos || dst.name.rfind("optimizer/", 0) == 0;
      if (slot) {
        plan.optimizer_state += allocated_bytes(bytes);
        if (it != index.end()) plan.layers[it->second].optimizer_state += allocated_bytes(bytes);
      } else if (weight_names.count(dst.name)) {  // the update of a weight: its gradient
        plan.gradients += bytes;
        if (it != index.end()) plan.layers[it->second].gradients += bytes;
      }
    } else if (n.op == graph::Op::StepControl && n.attrs.update->loss_scale_initial > 0.0f) {
      plan.optimizer_state += allocated_bytes(3 * sizeof(float));  // the loss-scale state
    } else if (mp.offset[static_cast<size_t>(id)] >= 0 && !graph::is_alias(t.g, id) &&
               n.name.find('/') != std::string::npos) {
      auto it = index.find(layer_of(n.name));
      if (it != index.end())
        plan.layers[it->second].activations += static_cast<size_t>(n.shape.numel()) * dtype_size(n.dtype);
    }
  }
  plan.steps = static_cast<int>(order.size());
  // The layer each node belongs to: from its name ("dense/matmul", or a layer's own name); the backward
  // pass's nodes are named "grad:<the forward node they differentiate>".
  std::vector<std::string> owner(static_cast<size_t>(t.g.size()));
  for (int id = 0; id < t.g.size(); ++id) {
    const std::string& name = t.g[id].name;
    const std::string l = layer_of(name.rfind("grad:", 0) == 0 ? name.substr(5) : name);
    if (index.count(l)) owner[static_cast<size_t>(id)] = l;
  }
  for (int id : order) {
    const int64_t offset = mp.offset[static_cast<size_t>(id)];
    const graph::Node& n = t.g[id];
    if (offset < 0 || graph::is_alias(t.g, id)) continue;  // bytes of its bucket, listed once
    PlannedValue v;
    v.name = n.name;
    v.layer = owner[static_cast<size_t>(id)];
    v.kind = n.op == graph::Op::Input ? "input" : n.name.find("grad") != std::string::npos ? "gradient" : "activation";
    v.offset = static_cast<size_t>(offset);
    const size_t bytes = static_cast<size_t>(n.shape.numel()) * dtype_size(n.dtype);
    v.bytes = std::max((bytes + graph::kArenaAlignment - 1) / graph::kArenaAlignment * graph::kArenaAlignment,
                       graph::kArenaAlignment);  // as plan_memory sizes it
    v.first = mp.first_use[static_cast<size_t>(id)];
    v.last = mp.last_use[static_cast<size_t>(id)];
    plan.values.push_back(std::move(v));
  }
  plan.total = plan.weights + plan.optimizer_state + plan.arena + plan.workspace;
  if (device.kind != DeviceKind::cpu)  // the slots live in the device's memory: a save stages the largest
    for (const LayerMemory& l : plan.layers)
      if (l.optimizer_state > 0)
        for (const LayerPtr& layer : layers)
          if (layer->name == l.layer)
            for (const Weight& w : layer->weights())
              plan.file_staging = std::max(plan.file_staging, std::min(w.value.nbytes(), io::file_staging_capacity()));
  plan.rematerialized = remat;
  plan.recomputed_ops = stats.recomputed_ops;
  plan.recompute_flops = stats.recomputed_flops;
  double forward = 0;
  for (int id = 0; id < t.g.size(); ++id)
    if (t.g[id].name.find("grad") == std::string::npos && t.g[id].name.find("/recompute") == std::string::npos)
      forward += graph::op_flops(t.g, id);
  plan.step_flops = 3 * forward;
  return plan;
}
}  // namespace nn

std::string MemoryPlan::to_string() const {
  using config::format_bytes;
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "Memory plan of one training step, batch size %lld\n",
                static_cast<long long>(batch_size));
  out += line;
  std::snprintf(line, sizeof line, "%-28s %12s %12s %12s %14s\n", "Layer", "Weights", "Gradients", "Optimizer",
                "Activations");
  out += line;
  for (const LayerMemory& l : layers) {
    std::snprintf(line, sizeof line, "%-28s %12s %12s %12s %14s\n", l.layer.substr(0, 28).c_str(),
                  format_bytes(l.weights).c_str(), format_bytes(l.gradients).c_str(),
                  format_bytes(l.optimizer_state).c_str(), format_bytes(l.activations).c_str());
    out += line;
  }
  out += "Totals\n";
  auto row = [&](const char* what, size_t v, const char* note) {
    std::snprintf(line, sizeof line, "  %-18s %12s  %s\n", what, format_bytes(v).c_str(), note);
    out += line;
  };
  row("weights", weights, "persistent");
  row("optimizer state", optimizer_state, "persistent");
  row("arena", arena, "inputs, activations and gradients, sharing memory where lifetimes allow");
  row("  (gradients)", gradients, "part of the arena");
  row("  (without reuse)", unshared, "what the arena would be if nothing shared memory");
  row("workspace", workspace, "scratch shared by all ops");
  row("total (peak)", total, "weights + optimizer state + arena + workspace");
  row("file staging", file_staging,
      file_staging == 0 ? "saves, checkpoints and loads use each tensor's own memory: nothing more"
                        : "host memory a save, checkpoint or load holds (one staging buffer for device tensors)");
  if (alternative_total > 0) {
    const bool saves = alternative_total < total;
    const size_t d = saves ? total - alternative_total : alternative_total - total;
    std::snprintf(line, sizeof line, "  dtype policy %s: under %s the step would take %s (%s %s%s%s)\n",
                  dtype_policy.c_str(), alternative_policy.c_str(), format_bytes(alternative_total).c_str(),
                  saves ? "switching saves" : "switching needs", format_bytes(d).c_str(),
                  saves ? ": --dtype-policy " : " more", saves ? alternative_policy.c_str() : "");
    out += line;
  }
  if (rematerialized) {
    std::snprintf(line, sizeof line,
                  "  rematerialized: %d forward ops recomputed during backward, +%.1f%% compute per step\n",
                  recomputed_ops, step_flops > 0 ? 100.0 * recompute_flops / step_flops : 0.0);
    out += line;
  }
  return out;
}

}  // namespace tk
