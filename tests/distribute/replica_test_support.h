// What the data-parallel tests share (tests/distribute/test_mirrored_*.cpp, tests/test_cuda_data_parallel.cpp):
//
//   tk::testing::split_cpu();                                    // cpu:0 2000 MiB, cpu:1 and cpu:2 500 MiB each
//   tk::distribute::MirroredStrategy s(tk::testing::first_cpus(2));
//   auto rec = std::make_shared<tk::testing::StepRecorder>();   // fit(..., {.callbacks = {rec}})
//   rec->after_step[k], rec->loss[k]                             // weights and loss after step k + 1
#pragma once
#include <cstddef>
#include <vector>

#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk::testing {

// Splits the cpu into cpu:0 (2000 MiB), cpu:1 and cpu:2 (500 MiB each) unless it already is: the first call in a
// test process does it (the tests run one per process), so the budgets differ and the tightest replica is cpu:1.
inline void split_cpu() {
  constexpr size_t MiB = size_t{1} << 20;
  int cpus = 0;
  for (const DeviceInfo& d : config::list_devices()) cpus += d.device.kind == DeviceKind::cpu;
  if (cpus < 3) config::set_logical_device_configuration(Device::cpu(), {2000 * MiB, 500 * MiB, 500 * MiB});
}

// cpu:0 .. cpu:n-1
inline std::vector<Device> first_cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cpu(i));
  return d;
}

// The weights and the loss after every training step.
struct StepRecorder : Callback {
  std::vector<std::vector<Tensor>> after_step;
  std::vector<double> loss;
  void on_train_batch_end(int64_t, const Logs& logs) override {
    after_step.push_back(model->get_weights());
    loss.push_back(logs.get("loss"));
  }
};

}  // namespace tk::testing
