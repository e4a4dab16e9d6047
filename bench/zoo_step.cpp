// One training step of a Keras model file (bench/zoo_step.sh: keras.applications' ResNet50 at 32x32, saved by
// bench/peers/keras_zoo.py), timed as the median of train_on_batch over --steps steps after --warmup. Prints one
// JSON line for bench/summarize.py; the step's peak memory (planned and measured) is in it.
//
//   ./build/bench/tk_bench_zoo --model resnet50.keras [--batch-size 32] [--steps 10] [--warmup 3]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "trainkit/trainkit.h"

int main(int argc, char** argv) try {
  std::string path;
  int64_t batch = 32;
  int steps = 10, warmup = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model")) path = argv[i + 1];
    if (!std::strcmp(argv[i], "--batch-size")) batch = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
  }
  if (path.empty()) throw tk::InvalidArgument("--model FILE.keras is required");
  tk::bench::reset_hwm();
  const size_t rss_before = tk::bench::status_bytes("VmRSS");       // the peers measure from the same point
  std::unique_ptr<tk::Model> model = tk::models::load_model(path);  // compiled as the file says
  const tk::Shape in = model->inputs()[0].shape();                  // (None, H, W, C)
  std::vector<int64_t> dims{batch};
  for (int i = 1; i < in.rank(); ++i) dims.push_back(in[i]);
  // The batch this caller holds counts in the device's memory but not in the step's plan (fit's staging buffers would
  // be planned): measured here and reported apart, so that planned + caller_tensor_bytes = measured.
  const size_t before_batch = tk::config::get_memory_info(model->device()).current;
  tk::Tensor x(tk::Shape(dims), tk::DType::f32), y(tk::Shape{batch}, tk::DType::i32);
  const size_t caller = tk::config::get_memory_info(model->device()).current - before_batch;
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f;
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  const size_t planned = model->memory_plan(batch).total;
  tk::config::reset_peak_memory(model->device());  // the step's peak, not the file load's (it reads each tensor once)
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = tk::bench::Clock::now();
    model->train_on_batch({x}, {y});
    if (s >= warmup) ms.push_back(1e3 * tk::bench::seconds(t0, tk::bench::Clock::now()));
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  const size_t peak = tk::config::get_memory_info(model->device()).peak;
  std::printf(
      "{\"peer\":\"trainkit\",\"cpu\":\"%s\",\"threads\":%d,\"model\":\"%s\",\"batch_size\":%lld,\"step_ms\":%.2f,"
      "\"samples_per_s\":%.1f,\"planned_peak_bytes\":%zu,\"measured_peak_bytes\":%zu,"
      "\"caller_tensor_bytes\":%zu,\"rss_peak_growth_bytes\":%zu}\n",
      tk::bench::cpu_description().c_str(), omp_get_max_threads(), model->name().c_str(), static_cast<long long>(batch),
      median, 1e3 * double(batch) / median, planned, peak, caller, tk::bench::status_bytes("VmHWM") - rss_before);
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "tk_bench_zoo: %s\n", e.what());
  return 1;
}
