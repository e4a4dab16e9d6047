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
  void stage(std::vector<Tensor> x, std::vector<Tensor> y) override {
    x_ = std::move(x);
    y_ = std::move(y);
  }
  int64_t bind(nn::Compiled&, bool) override { return 0; }
  const std::vector<Tensor>& x() const override { return x_; }
  const std::vector<Tensor>& y() const override { return y_; }

 private:
  std::vector<Tensor> x_, y_;
};

}  // namespace tk::testing
