// The blocks a dataset is read or written in through a bounded buffer: whole rows of its trailing dimensions, or
// parts of its last one, each a contiguous byte range of the row-major tensor and one HDF5 hyperslab. Writing a GPU's
// tensor (hdf5_write.cpp) and the HDF5 helper reading a dataset (hdf5_tree.cpp) both walk a dataset this way, so
// neither holds more than one buffer of it.
//
//   for_each_block(dims, 4, capacity, [&](const hsize_t* start, const hsize_t* count, size_t offset, size_t n) {...});
#pragma once
#include <hdf5.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tk::io {

// Calls block(start, count, byte offset, elements) over the dataset in row-major order; every block is at most
// `capacity` bytes (at least one element). A dataset that fits is one block (start all 0, count = dims).
template <typename Block>
void for_each_block(const std::vector<hsize_t>& dims, size_t element, size_t capacity, Block&& block) {
  const int rank = static_cast<int>(dims.size());
  size_t numel = 1;
  for (hsize_t d : dims) numel *= d;
  std::vector<hsize_t> start(dims.size(), 0), count(dims);
  if (numel == 0) return;
  if (numel * element <= capacity || rank == 0) {
    block(start.data(), count.data(), size_t{0}, numel);
    return;
  }
  // The first dimension k whose trailing block (d[k:]) fits the buffer; blocks of m rows along d[k-1].
  int k = rank;
  size_t inner = 1;  // elements of d[k:]
  while (k > 0 && (inner * dims[static_cast<size_t>(k - 1)]) * element <= capacity)
    inner *= dims[static_cast<size_t>(--k)];
  const size_t along = dims[static_cast<size_t>(k - 1)];
  const size_t m = std::max<size_t>(1, capacity / (inner * element));
  size_t outer = 1;  // index tuples over d[0 : k-1]
  for (int i = 0; i < k - 1; ++i) outer *= dims[static_cast<size_t>(i)];
  std::fill(count.begin(), count.end(), hsize_t{1});
  for (int i = k; i < rank; ++i) count[static_cast<size_t>(i)] = dims[static_cast<size_t>(i)];
  for (size_t o = 0; o < outer; ++o) {
    for (size_t rest = o, i = static_cast<size_t>(k - 1); i-- > 0;)  // o as an index tuple over d[0 : k-1]
      start[i] = rest % dims[i], rest /= dims[i];
    for (size_t j = 0; j < along; j += m) {
      const size_t rows = std::min(m, along - j);
      start[static_cast<size_t>(k - 1)] = j;
      count[static_cast<size_t>(k - 1)] = rows;
      block(start.data(), count.data(), (o * along + j) * inner * element, rows * inner);
    }
  }
}

}  // namespace tk::io
