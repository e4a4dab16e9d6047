#include "graph/bucket.h"

#include <algorithm>
#include <numeric>

namespace tk::graph {

std::vector<int64_t> bucket_offsets(const Graph& g, int node) {
  std::vector<int64_t> out;
  int64_t at = 0;
  for (int in : g[node].inputs) {
    out.push_back(at);
    at += bucket_slot(g[in].shape.numel());
  }
  return out;
}

int64_t bucket_elements(const Graph& g, int node) {
  int64_t at = 0;
  for (int in : g[node].inputs) at += bucket_slot(g[in].shape.numel());
  return at;
}

std::vector<int> add_all_reduces(Graph& g, const std::vector<int>& grads, const std::vector<std::string>& names,
                                 const AllReduceOptions& o) {
  std::vector<int> out = grads;
  // Readiness: a source (an accumulator) is ready from the start; a computed gradient when its node runs, and the
  // schedule follows node ids (graph/schedule.h).
  auto ready = [&](size_t i) { return is_source(g[grads[i]].op) ? -1 : grads[i]; };
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] >= 0) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready(a) < ready(b); });

  int64_t sequence = 0;
  auto emit = [&](const std::vector<size_t>& members) {
    Attrs at;
    at.collective = o.collective;
    at.replica = o.replica;
    at.begin = sequence++;
    at.zero_grad = o.zero_inputs;
    at.overlap = o.overlap;
    std::vector<int> ins;
    for (size_t i : members) ins.push_back(grads[i]);
    const std::string name =
        members.size() == 1 ? names[members[0]] + "/all_reduce"
                            : "all_reduce/bucket_" + std::to_string(at.begin) + " (" + std::to_string(members.size()) +
                                  " gradients: " + names[members.front()] + " to " + names[members.back()] + ")";
    int bucket = g.add(Op::AllReduce, std::move(ins), at, name);
    const std::vector<int64_t> offsets = bucket_offsets(g, bucket);
    if (o.overlap) bucket = g.add(Op::AllReduceWait, {bucket}, {}, name + "/wait");
    if (members.size() == 1) {
      out[members[0]] = bucket;
      return;
    }
    for (size_t k = 0; k < members.size(); ++k) {
      Attrs view;
      view.begin = offsets[k];
      view.shape = g[grads[members[k]]].shape;
      out[members[k]] = g.add(Op::View, {bucket}, view, names[members[k]] + "/all_reduce");
    }
  };
  std::vector<size_t> bucket;
  size_t bytes = 0;
  bool first = true;  // overlapping: the first bucket is small, so that it starts early
  for (size_t i : order) {
    const Node& n = g[grads[i]];
    const size_t size = static_cast<size_t>(bucket_slot(n.shape.numel())) * dtype_size(n.dtype);
    if (n.dtype != DType::f32) {  // reduced alone
      emit({i});
      continue;
    }
    const size_t cap = o.overlap && first ? std::min(o.bucket_bytes, kFirstBucketBytes) : o.bucket_bytes;
    if (!bucket.empty() && bytes + size > cap) {
      emit(bucket);
      bucket.clear();
      bytes = 0;
      first = false;
    }
    bucket.push_back(i);
    bytes += size;
  }
  if (!bucket.empty()) emit(bucket);
  return out;
}

}  // namespace tk::graph
