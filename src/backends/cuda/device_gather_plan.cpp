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

bool device_gather_converts(DType from, DType to) {
  auto known = [](DType t) {
    switch (t) {
      case DType::f32:
      case DType::f16:
      case DType::bf16:
      case DType::i32:
      case DType::i64:
      case DType::u8:
      case DType::boolean:
        return true;
    }
    return false;
  };
  return known(from) && known(to);
}

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
