#include "graph/program.h"

#include <cstdlib>
#include <cstring>

#include "trainkit/core/error.h"

namespace tk::graph {

Program::Program(Graph g, std::vector<int> outputs, std::vector<int> sinks, Device device) : g_(std::move(g)) {
  std::vector<int> roots = outputs;
  roots.insert(roots.end(), sinks.begin(), sinks.end());
  order_ = schedule(g_, roots);
  std::vector<int> keep = outputs;
  for (int id : order_)
    if (g_[id].op == Op::Input) keep.push_back(id);
  plan_ = plan_memory(g_, order_, keep);

  size_t bytes = plan_.arena_bytes == 0 ? kArenaAlignment : plan_.arena_bytes;
  void* arena = std::aligned_alloc(kArenaAlignment, bytes);
  if (!arena) throw OutOfMemoryError("program arena of " + std::to_string(bytes) + " bytes could not be allocated");
  std::memset(arena, 0, bytes);
  arena_ = {static_cast<std::byte*>(arena), std::free};

  // Resolve every kernel and pointer now; run() only walks steps_.
  steps_.reserve(order_.size());
  for (int id : order_) {
    const Node& n = g_[id];
    if (n.op == Op::Input || n.op == Op::Variable) continue;
    Step s{find_kernel(device.kind, n.op, n.dtype), id, op_info(n.op).has_output ? data(id) : nullptr, in_ptrs_.size()};
    for (int in : n.inputs) in_ptrs_.push_back(data(in));
    steps_.push_back(s);
  }
}

void* Program::data(int value) {
  const Node& n = g_[value];
  if (n.op == Op::Variable) return n.attrs.external;
  int64_t off = plan_.offset[static_cast<size_t>(value)];
  if (off < 0) throw InvalidArgument("value '" + n.name + "' has no storage in this program");
  return arena_.get() + off;
}

void Program::run(const ExecContext& ctx) {
  for (const Step& s : steps_) {
    const Node& n = g_[s.node];
    s.fn(KernelArgs{g_, n, s.out, in_ptrs_.data() + s.in_begin, ctx});
  }
}

}  // namespace tk::graph
