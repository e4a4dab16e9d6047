// How a batch's rows of a device-resident array (Dataset::on_device(cuda:N)) reach a program input on the same
// device: host logic of device_gather.h, built in every build and unit-tested without a GPU
// (tests/test_device_batches.cpp).
//
//   rows idx[0..n) of src(N, row) -> dst(n, row) in the input's dtype, x * scale + offset (a fused Rescaling)
//
// Same dtype, no scaling, and the rows in at most kMaxCopyRuns runs of consecutive rows (an unshuffled batch is one):
// one device-to-device copy per run. Anything else: the gather kernel (device_gather.cu), which converts every pair of
// dtypes with core/convert_one.h (the CPU staging's element rule) and reads the row numbers from the device (uploaded
// once per batch) unless the rows are consecutive, when it takes the first row as an argument.
//
//   tk::cuda::GatherPlan p = tk::cuda::plan_device_gather(DType::u8, DType::f32, 1 / 255.f, 0, idx, 0, 64);
//   // p.kind == GatherPlan::Kind::kernel, p.indexed == true (shuffled), p.scaled == true
#pragma once
#include <cstdint>
#include <vector>

#include "trainkit/core/dtype.h"

namespace tk::cuda {

// [first, first + count) of the source's rows, taken in order.
struct IndexRun {
  int64_t first = 0, count = 0;
  bool operator==(const IndexRun&) const = default;
};

// The rows idx[0..n) (or [begin, begin + n) when idx is null) as maximal runs of consecutive rows, in order.
std::vector<IndexRun> index_runs(const int64_t* idx, int64_t begin, int64_t n);

// The first row when the n rows are consecutive (one run), else -1.
int64_t contiguous_first(const int64_t* idx, int64_t begin, int64_t n);

struct GatherPlan {
  enum class Kind { copy, kernel } kind = Kind::copy;
  std::vector<IndexRun> runs;  // copy: one cudaMemcpyAsync per run
  bool indexed = false;        // kernel: reads the row numbers uploaded to the device (else rows first, first + 1, ...)
  int64_t first = 0;           // kernel, not indexed: the first row
  bool scaled = false;         // kernel: x * scale + offset (only into a floating dtype, as the host staging does)
};

inline constexpr size_t kMaxCopyRuns = 4;

GatherPlan plan_device_gather(DType from, DType to, float scale, float offset, const int64_t* idx, int64_t begin,
                              int64_t n);

}  // namespace tk::cuda
