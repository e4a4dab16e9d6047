// Where AUTOTUNE settles, as a measurement (it depends on timing, so no test asserts it; see CONTRIBUTING).
//
//   tk_bench_autotune [--map-us 200] [--consumer-us 1000] [--elements 400] [--cpu-budget 8]
//
// A map costing --map-us of CPU per element (num_parallel_calls = AUTOTUNE, starting at --cpu-budget threads)
// feeds a consumer that takes --consumer-us per element, then prefetch(AUTOTUNE). The map should settle near
// ceil(1.25 * map / consumer) threads (one for the defaults) and the prefetch depth stay small. Output: one
// JSON line with the settled parallelism, the prefetch buffer limit and the expected parallelism.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "trainkit/data/dataset.h"

namespace {

void spin_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  long map_us = 200, consumer_us = 1000, elements = 400, cpu_budget = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--map-us"))
      map_us = v;
    else if (!std::strcmp(argv[i], "--consumer-us"))
      consumer_us = v;
    else if (!std::strcmp(argv[i], "--elements"))
      elements = v;
    else if (!std::strcmp(argv[i], "--cpu-budget"))
      cpu_budget = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  using tk::data::AUTOTUNE;
  tk::data::Dataset d = tk::data::Dataset::range(elements)
                            .map(
                                [map_us](tk::data::Element e) {
                                  spin_for(std::chrono::microseconds(map_us));
                                  return e;
                                },
                                {.num_parallel_calls = AUTOTUNE})
                            .prefetch(AUTOTUNE)
                            .with_options({.cpu_budget = static_cast<int>(cpu_budget)});
  tk::data::Iterator it = d.iterator();
  tk::data::Element e;
  while (it.next(e)) std::this_thread::sleep_for(std::chrono::microseconds(consumer_us));
  int parallelism = -1;
  int64_t prefetch_limit = -1;
  for (const tk::data::StageStats& s : it.stats()) {
    if (s.kind == "map") parallelism = s.parallelism;
    if (s.kind == "prefetch") prefetch_limit = s.buffer_limit;
  }
  const int expected = std::max(1, static_cast<int>(std::ceil(1.25 * double(map_us) / double(consumer_us))));
  std::printf(
      "{\"bench\": \"autotune\", \"map_us\": %ld, \"consumer_us\": %ld, \"map_parallelism\": %d, "
      "\"expected_parallelism\": %d, \"prefetch_buffer_limit\": %lld}\n",
      map_us, consumer_us, parallelism, expected, static_cast<long long>(prefetch_limit));
  return 0;
}
