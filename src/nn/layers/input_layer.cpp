// InputLayer and Input: the model's entry points (keras.Input).
#include "nn/layers/input_layer.h"

#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace nn {

InputLayer::InputLayer(Shape sample_shape, std::string given, DType type)
    : Layer("input_layer", std::move(given)), dtype(type) {
  if (dtype != DType::f32 && dtype != DType::i32 && dtype != DType::i64)
    throw InvalidArgument("Input '" + name + "': dtype " + std::string(dtype_name(dtype)) +
                          " is not supported (float32 for features, int32 or int64 for token ids)");
  std::vector<int64_t> dims{-1};
  for (int64_t d : sample_shape.dims()) {
    if (d <= 0)
      throw InvalidArgument("Input '" + name + "': shape " + sample_shape.to_string() +
                            " must have positive dimensions");
    dims.push_back(d);
  }
  batch_shape = Shape(std::move(dims));
  built_ = true;
}

KerasTensor input_tensor(std::shared_ptr<InputLayer> layer) {
  auto node = std::make_shared<KerasTensor::NodeData>();
  node->shapes = {layer->batch_shape};
  node->layer = std::move(layer);
  return KerasTensor{node};
}

int InputLayer::call(CallContext&, const std::vector<int>&) const {
  throw InvalidArgument("InputLayer '" + name + "' cannot be called");
}

}  // namespace nn

namespace {
std::shared_ptr<nn::InputLayer> make_input(Shape shape, std::string name, DType dtype) {
  return std::make_shared<nn::InputLayer>(std::move(shape), std::move(name), dtype);
}
}  // namespace

KerasTensor Input(Shape shape, std::string name, DType dtype) {
  return nn::input_tensor(make_input(std::move(shape), std::move(name), dtype));
}

namespace layers {
LayerPtr Input(Shape shape, std::string name, DType dtype) {
  return make_input(std::move(shape), std::move(name), dtype);
}
}  // namespace layers

}  // namespace tk
