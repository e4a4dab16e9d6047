// plan_device_gather and its parts (device_gather_plan.h): plain C++, in every build.
#include "backends/cuda/device_gather_plan.h"

namespace tk::cuda {

std::vector<IndexRun> index_runs(const int64_t* idx, int64_t begin, int64_t n) {
  std::vector<IndexRun> runs;
  if (n <= 0) return runs;
  if (!idx) return {IndexRun{begin, n}};
  runs.push_back({idx[0], 1});
  for (int64_t i = 1; i < n; ++i) {
    IndexRun& last = runs.back();
    if (idx[i] == last.first + last.count)
      ++last.count;
    else
      runs.push_back({idx[i], 1});
  }
  return runs;
}

int64_t contiguous_first(const int64_t* idx, int64_t begin, int64_t n) {
  if (!idx) return begin;
  for (int64_t i = 1; i < n; ++i)
    if (idx[i] != idx[0] + i) return -1;
  return n > 0 ? idx[0] : begin;
}

// The gather kernel (device_gather.cu, with_type) takes dtypes as these codes and instantiates every pair of them.
static_assert(static_cast<int>(DType::f32) == 0 && static_cast<int>(DType::f16) == 1 &&
                  static_cast<int>(DType::bf16) == 2 && static_cast<int>(DType::i32) == 3 &&
                  static_cast<int>(DType::i64) == 4 && static_cast<int>(DType::u8) == 5 &&
                  static_cast<int>(DType::boolean) == 6 && kDTypeCount == 7,
              "device_gather.cu's with_type numbers the dtypes as tk::DType does: update both together");

GatherPlan plan_device_gather(DType from, DType to, float scale, float offset, const int64_t* idx, int64_t begin,
                              int64_t n) {
  GatherPlan p;
  p.scaled = (scale != 1.0f || offset != 0.0f) && is_floating(to);
  if (from == to && !p.scaled) {
    std::vector<IndexRun> runs = index_runs(idx, begin, n);
    if (runs.size() <= kMaxCopyRuns) {
      p.kind = GatherPlan::Kind::copy;
      p.runs = std::move(runs);
      return p;
    }
  }
  p.kind = GatherPlan::Kind::kernel;
  const int64_t first = contiguous_first(idx, begin, n);
  p.indexed = first < 0;
  p.first = first < 0 ? 0 : first;
  return p;
}

}  // namespace tk::cuda
