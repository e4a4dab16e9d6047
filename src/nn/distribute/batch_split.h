// How a global batch is split over the replicas in sync: in order, the first bs % replicas one row more. One rule for
// the split of the step (replicated_step.cpp) and for the rows each MPI rank reads of a Dataset (worker_input.cpp).
#pragma once
#include <algorithm>
#include <cstdint>

namespace tk::nn::distribute {

// One replica's part of the global batch: rows [first, first + rows), weighted by its share in the all-reduce.
// weight 0: a replica with no rows of its own (a batch smaller than the replica count under MPI, where every rank
// must take part in every collective) runs one row that counts for nothing.
struct Shard {
  int64_t rows = 0, first = 0;
  float weight = 0.0f;
};

// Replica g of `active` gets the global batch's rows in order, the first bs % active one more.
inline Shard shard_of(int64_t g, int64_t active, int64_t bs) {
  if (g >= active) return {1, 0, 0.0f};
  const int64_t base = bs / active, extra = bs % active;
  const int64_t rows = base + (g < extra ? 1 : 0);
  return {rows, g * base + std::min(g, extra), static_cast<float>(rows) / static_cast<float>(bs)};
}

// Under MPI (one replica per rank, `ranks` of them): rank `rank`'s shard of a global batch of bs rows.
inline Shard rank_shard(int64_t rank, int64_t ranks, int64_t bs) { return shard_of(rank, std::min(ranks, bs), bs); }

}  // namespace tk::nn::distribute
