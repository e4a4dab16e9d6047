#include "graph/schedule.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "graph/kernel.h"

namespace tk::graph {

std::vector<char> needed_by(const Graph& g, const std::vector<int>& roots) {
  std::vector<char> needed(static_cast<size_t>(g.size()), 0);
  for (int r : roots) needed[static_cast<size_t>(r)] = 1;
  for (int id = g.size() - 1; id >= 0; --id)
    if (needed[static_cast<size_t>(id)])
      for (int in : g[id].inputs) needed[static_cast<size_t>(in)] = 1;
  return needed;
}

std::vector<int> schedule(const Graph& g, const std::vector<int>& roots) {
  const size_t n = static_cast<size_t>(g.size());
  const std::vector<char> needed = needed_by(g, roots);

  // Readers of each value, to place in-place updates after every reader of what they overwrite.
  std::vector<int> last_reader(n, -1);
  for (int id = 0; id < g.size(); ++id)
    if (needed[static_cast<size_t>(id)] && op_info(g[id].op).has_output)
      for (int in : g[id].inputs)
        last_reader[static_cast<size_t>(in)] = std::max(last_reader[static_cast<size_t>(in)], id);

  // Sort key: a node's own id, except
  // - update ops, which go right after max(inputs, readers of inputs);
  // - AllReduce ops, which start as soon as their last gradient is ready (a bucket's, graph/bucket.h), so its
  //   gradients die and its updates run early;
  // - Views, which run nothing: they sit right after the value they look into.
  // Ids are topological (a node's inputs were added before it), so one pass in id order sees every input's key.
  std::vector<double> key(n, 0.0);
  std::vector<std::pair<double, int>> keyed;
  auto ready = [&](int in) {  // a source (weight, optimizer slot, accumulator) is ready from the start whatever its id
    return is_source(g[in].op) ? 0.0 : key[static_cast<size_t>(in)];
  };
  for (int id = 0; id < g.size(); ++id) {
    if (!needed[static_cast<size_t>(id)]) continue;
    double k = id;
    const Op op = g[id].op;
    if (!op_info(op).has_output) {
      double after = 0;
      for (int in : g[id].inputs)  // slots are created after the gradient ops: only their readers order the update
        after = std::max({after, ready(in), static_cast<double>(last_reader[static_cast<size_t>(in)])});
      k = std::floor(after) + 0.5;
    } else if (op == Op::AllReduce) {
      double after = 0;
      for (int in : g[id].inputs) after = std::max(after, ready(in));
      k = std::floor(after) + 0.25;
    } else if (op == Op::View) {
      k = key[static_cast<size_t>(g[id].inputs[0])] + 0.0625;
    }
    key[static_cast<size_t>(id)] = k;
  }
  // - Constrain ops, which go right after every other in-place writer of their variable (its update, or the
  //   MultiUpdate a fusion pass grouped it into, whatever their ids). Nothing reads a Constrain: moving it moves
  //   no other key.
  for (int id = 0; id < g.size(); ++id) {
    if (!needed[static_cast<size_t>(id)] || g[id].op != Op::Constrain) continue;
    const int var = g[id].inputs[0];
    for (int w = 0; w < g.size(); ++w)
      if (w != id && needed[static_cast<size_t>(w)] && !op_info(g[w].op).has_output &&
          std::find(g[w].inputs.begin(), g[w].inputs.end(), var) != g[w].inputs.end())
        key[static_cast<size_t>(id)] = std::max(key[static_cast<size_t>(id)], key[static_cast<size_t>(w)] + 0.125);
  }
  for (int id = 0; id < g.size(); ++id)
    if (needed[static_cast<size_t>(id)]) keyed.emplace_back(key[static_cast<size_t>(id)], id);
  std::stable_sort(keyed.begin(), keyed.end());
  std::vector<int> order;
  order.reserve(keyed.size());
  for (auto& [k, id] : keyed) order.push_back(id);
  return order;
}

namespace {
size_t align_up(size_t x) { return (x + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
bool in_arena(const Graph& g, int id) {
  return g[id].op != Op::Variable && !is_alias(g, id) && op_info(g[id].op).has_output;
}
}  // namespace

MemoryPlan plan_memory(const Graph& g, const std::vector<int>& order, const std::vector<int>& keep, Device device) {
  const size_t n = static_cast<size_t>(g.size());
  MemoryPlan plan;
  plan.offset.assign(n, -1);
  plan.first_use.assign(n, -1);
  plan.last_use.assign(n, -1);
  const int end = static_cast<int>(order.size());
  for (int step = 0; step < end; ++step) {
    int id = order[static_cast<size_t>(step)];
    plan.first_use[static_cast<size_t>(id)] = step;
    plan.last_use[static_cast<size_t>(id)] = std::max(plan.last_use[static_cast<size_t>(id)], step);
    if (is_side_output(g, id)) continue;  // reads nothing when it is scheduled: its input's kernel wrote it
    for (int in : g[id].inputs) plan.last_use[static_cast<size_t>(in)] = step;
  }
  for (int id : order)  // written with its input: alive from that step, beside the input's own operands
    if (is_side_output(g, id))
      plan.first_use[static_cast<size_t>(id)] = plan.first_use[static_cast<size_t>(g[id].inputs[0])];
  for (int k : keep) {
    plan.last_use[static_cast<size_t>(k)] = end;
    if (g[k].op == Op::Input) plan.first_use[static_cast<size_t>(k)] = -1;  // written before step 0
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it)  // a View's readers keep what it looks into alive
    if (is_alias(g, *it)) {
      int& base_last = plan.last_use[static_cast<size_t>(g[*it].inputs[0])];
      base_last = std::max(base_last, plan.last_use[static_cast<size_t>(*it)]);
    }

  struct Item {
    int id;
    size_t bytes;
  };
  std::vector<Item> items;
  for (int id : order)
    if (in_arena(g, id)) {
      size_t bytes = align_up(static_cast<size_t>(g[id].shape.numel()) * dtype_size(g[id].dtype));
      items.push_back({id, bytes == 0 ? kArenaAlignment : bytes});
      plan.unplanned_bytes += items.back().bytes;
    }
  // Largest first; each goes to the lowest offset that does not collide with a placed buffer whose
  // lifetime overlaps.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
  struct Placed {
    size_t offset, bytes;
    int first, last;
  };
  std::vector<Placed> placed;
  for (const Item& it : items) {
    int first = plan.first_use[static_cast<size_t>(it.id)], last = plan.last_use[static_cast<size_t>(it.id)];
    std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of overlapping lifetimes
    for (const Placed& p : placed)
      if (!(p.last < first || last < p.first)) busy.emplace_back(p.offset, p.offset + p.bytes);
    std::sort(busy.begin(), busy.end());
    size_t best = 0, best_gap = SIZE_MAX, cursor = 0;  // best_gap SIZE_MAX: no gap fits, place it at the end
    for (auto& [b, e] : busy) {
      if (b > cursor && b - cursor >= it.bytes && b - cursor < best_gap) {
        best = cursor;
        best_gap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    if (best_gap == SIZE_MAX) best = cursor;
    placed.push_back({best, it.bytes, first, last});
    plan.offset[static_cast<size_t>(it.id)] = static_cast<int64_t>(best);
    plan.arena_bytes = std::max(plan.arena_bytes, best + it.bytes);
  }
  for (int id : order)  // an alias comes after what it reads, so a View of a wait finds its base placed
    if (is_alias(g, id) && plan.offset[static_cast<size_t>(g[id].inputs[0])] >= 0) {
      const int base = g[id].inputs[0];
      plan.offset[static_cast<size_t>(id)] =
          plan.offset[static_cast<size_t>(base)] + alias_begin(g, id) * static_cast<int64_t>(dtype_size(g[base].dtype));
    }
  for (int id : order)
    plan.workspace_bytes = std::max(plan.workspace_bytes, align_up(workspace_bytes(g, id, device.kind)));
  plan.workspace_bytes += kStepScalarsBytes;  // the step's scalars end the workspace region
  return plan;
}

}  // namespace tk::graph
