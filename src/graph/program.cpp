#include "graph/program.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "trainkit/core/error.h"

namespace tk::graph {

Program::Program(Graph g, std::vector<int> outputs, std::vector<int> sinks, Device device, const std::string& owner,
                 bool own_arena)
    : g_(std::move(g)) {
  std::vector<int> roots = outputs;
  roots.insert(roots.end(), sinks.begin(), sinks.end());
  order_ = schedule(g_, roots);
  std::vector<int> keep = outputs;
  for (int id : order_)
    if (g_[id].op == Op::Input) keep.push_back(id);
  plan_ = plan_memory(g_, order_, keep);

  // Resolve every kernel now; run() only walks steps_.
  steps_.reserve(order_.size());
  size_t n_inputs = 0;
  for (int id : order_) {
    const Node& n = g_[id];
    if (n.op == Op::Input || n.op == Op::Variable) continue;
    steps_.push_back(Step{find_kernel(device.kind, n.op, n.dtype), id, nullptr, n_inputs});
    n_inputs += n.inputs.size();
  }
  in_ptrs_.assign(n_inputs, nullptr);
  step_seconds_.assign(steps_.size(), 0.0);
  if (own_arena) bind_arena(Tensor(Shape{static_cast<int64_t>(arena_bytes_required())}, DType::u8, device, owner));
  const char* env = std::getenv("TK_PROFILE");
  profiling_ = print_profile_ = env && *env && *env != '0';
}

size_t Program::arena_bytes_required() const {
  return std::max(plan_.arena_bytes + plan_.workspace_bytes, kArenaAlignment);
}

void Program::bind_arena(Tensor arena) {
  arena_ = std::move(arena);
  if (!arena_.defined()) return;
  if (arena_.nbytes() < arena_bytes_required())
    throw InvalidArgument("program arena of " + std::to_string(arena_.nbytes()) + " bytes is smaller than the " +
                          std::to_string(arena_bytes_required()) + " bytes planned");
  // Every pointer a kernel receives, resolved once per arena.
  for (Step& s : steps_) {
    const Node& n = g_[s.node];
    s.out = op_info(n.op).has_output ? data(s.node) : nullptr;
    for (size_t i = 0; i < n.inputs.size(); ++i) in_ptrs_[s.in_begin + i] = data(n.inputs[i]);
  }
}

void* Program::data(int value) {
  const Node& n = g_[value];
  if (n.op == Op::Variable) return n.attrs.external;
  int64_t off = plan_.offset[static_cast<size_t>(value)];
  if (off < 0) throw InvalidArgument("value '" + n.name + "' has no storage in this program");
  if (!arena_.defined()) throw InvalidArgument("program has no arena bound (bind_arena)");
  return static_cast<std::byte*>(arena_.raw()) + off;
}

void Program::run(const ExecContext& ctx) {
  if (!arena_.defined()) throw InvalidArgument("program has no arena bound (bind_arena)");
  prepare_thread_for_kernels();
  void* workspace = static_cast<std::byte*>(arena_.raw()) + plan_.arena_bytes;
  if (!profiling_) {
    for (const Step& s : steps_) s.fn(KernelArgs{g_, g_[s.node], s.out, in_ptrs_.data() + s.in_begin, ctx, workspace});
    return;
  }
  using Clock = std::chrono::steady_clock;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    const auto t0 = Clock::now();
    s.fn(KernelArgs{g_, g_[s.node], s.out, in_ptrs_.data() + s.in_begin, ctx, workspace});
    step_seconds_[i] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  ++runs_;
}

Program::~Program() {
  if (print_profile_ && runs_ > 0) std::fputs(profile_report().c_str(), stderr);
}

std::string Program::profile_report(size_t top) const {
  std::vector<size_t> idx(steps_.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return step_seconds_[a] > step_seconds_[b]; });
  double total = 0;
  for (double t : step_seconds_) total += t;
  char line[256];
  std::snprintf(line, sizeof line, "program profile: %lld runs, %.3f ms per run, %zu ops, arena %.2f MiB\n",
                static_cast<long long>(runs_), runs_ ? 1e3 * total / double(runs_) : 0.0, steps_.size(),
                double(plan_.arena_bytes) / (1 << 20));
  std::string out = line;
  for (size_t k = 0; k < std::min(top, idx.size()); ++k) {
    const Step& s = steps_[idx[k]];
    const Node& n = g_[s.node];
    std::snprintf(line, sizeof line, "  %6.1f%% %9.1f us  %-18s %-28s %s\n",
                  total > 0 ? 100 * step_seconds_[idx[k]] / total : 0.0,
                  runs_ ? 1e6 * step_seconds_[idx[k]] / double(runs_) : 0.0, std::string(op_name(n.op)).c_str(),
                  n.name.c_str(), n.shape.to_string().c_str());
    out += line;
  }
  return out;
}

}  // namespace tk::graph
