// Tests that drive a graph::Program directly write its inputs the one way the library allows: through a
// nn::BatchStager. This one hands out a typed pointer to an input (host memory, cpu programs only).
//
//   float* x = ProgramFeeder::input<float>(program, x_id);
#pragma once
#include <stdexcept>

#include "nn/training/staging.h"

namespace tk::testing {

class ProgramFeeder final : public nn::BatchStager {
 public:
  template <typename T>
  static T* input(graph::Program& p, int value) {
    const graph::InputSlot s = input_slot(p, value);
    if (s.device.kind != DeviceKind::cpu || s.dtype != dtype_of<T>())
      throw std::logic_error("ProgramFeeder: input is not a host " + std::string(dtype_name(dtype_of<T>())) +
                             " buffer");
    return static_cast<T*>(s.data);
  }
};

}  // namespace tk::testing
