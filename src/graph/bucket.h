// Gradient buckets of data parallel training (PyTorch DDP's buckets, tf.distribute's bytes_per_pack): a step's
// gradients are packed, in the order the backward pass makes them, into buckets of at most `bucket_bytes`, and each
// bucket is one AllReduce: one collective (one pair of barriers, one MPI call, one NCCL launch) instead of one per
// weight. A bucket's output is flat: gradient i's sum sits at bucket_offsets()[i], each start aligned to the arena's
// 64 bytes, and the updates read it in place through View nodes (graph/op.h).
//
//   std::vector<int> reduced = tk::graph::add_all_reduces(g, grads, names, {.collective = c, .replica = r});
//   // reduced[i]: a View of gradient i inside its bucket (or a lone AllReduce, or its AllReduceWait when
//   // overlapping); -1 where grads[i] is -1
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tk::graph {

inline constexpr size_t kDefaultBucketBytes = size_t{25} << 20;  // PyTorch DDP's bucket_cap_mb = 25

// Elements a value of `numel` elements takes in a bucket: itself, then padding to a multiple of 16 elements, so
// every gradient of a float32 bucket starts on the arena's 64-byte alignment (the same layout for every dtype).
inline constexpr int64_t kBucketAlignElements = 16;
inline int64_t bucket_slot(int64_t numel) {
  return (numel + kBucketAlignElements - 1) / kBucketAlignElements * kBucketAlignElements;
}
// The element offset of each input of AllReduce node `node` in its flat output, and the output's length.
std::vector<int64_t> bucket_offsets(const Graph& g, int node);
int64_t bucket_elements(const Graph& g, int node);

struct AllReduceOptions {
  Collective* collective = nullptr;           // the replicas' group
  int replica = 0;                            // this program's replica
  size_t bucket_bytes = kDefaultBucketBytes;  // a gradient larger than this (or any, with 0) is reduced alone
  bool zero_inputs = false;                   // clear the inputs afterwards (micro-batching's accumulators)
  // Each bucket's all-reduce starts when its last gradient is ready and is finished by an AllReduceWait after the
  // backward pass, so the rest of the backward pass runs while it progresses. The first bucket is then at most
  // kFirstBucketBytes (PyTorch DDP's first bucket), so that something is in flight early.
  bool overlap = false;
};
inline constexpr size_t kFirstBucketBytes = size_t{1} << 20;

// Adds the AllReduce ops summing `grads` (value ids, -1 for none; `names[i]` names gradient i's weight) over the
// replicas, bucketed: float32 gradients in order of readiness (sources first, then by node id) fill a bucket until
// the next would pass bucket_bytes; other dtypes are reduced alone. Returns, per gradient, the value holding its sum.
std::vector<int> add_all_reduces(Graph& g, const std::vector<int>& grads, const std::vector<std::string>& names,
                                 const AllReduceOptions& options);

}  // namespace tk::graph
