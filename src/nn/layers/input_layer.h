// The layer behind keras.Input: it has no op of its own; programs bind a batch to it.
#pragma once
#include "trainkit/nn/layer.h"

namespace tk::nn {

class InputLayer final : public Layer {
 public:
  // dtype: float32 (features), or int32 / int64 (token ids, Keras' Input(dtype="int32")): the program's input keeps
  // it, and staging converts each batch to it.
  InputLayer(Shape sample_shape, std::string name, DType dtype = DType::f32);
  std::string class_name() const override { return "InputLayer"; }
  int arity() const override { return 0; }
  Shape build(const std::vector<Shape>&) override { return batch_shape; }
  int call(CallContext&, const std::vector<int>&) const override;
  Shape batch_shape;         // (None, ...sample_shape)
  DType dtype = DType::f32;  // f32, i32 or i64
};

// A new symbolic tensor produced by `layer`. The node owns the layer, never the reverse (no cycle).
KerasTensor input_tensor(std::shared_ptr<InputLayer> layer);

}  // namespace tk::nn
