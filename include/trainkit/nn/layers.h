// The built-in layers (Keras 3 names and defaults).
//
//   using namespace tk::layers;
//   auto model = tk::Sequential({Input({28, 28}), Flatten(), Dense(128, "relu"), Dropout(0.2), Dense(10)});
//   Dense(64, "relu", {.use_bias = false, .kernel_initializer = "he_normal", .name = "hidden"});
#pragma once
#include "trainkit/nn/layer.h"

namespace tk {

// Functional API entry point (keras.Input): a symbolic tensor of shape (None, ...shape).
KerasTensor Input(Shape shape, std::string name = {});

namespace layers {

// Sequential's first element (keras.Input / InputLayer).
LayerPtr Input(Shape shape, std::string name = {});

struct DenseOptions {
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
};
// Densely connected: activation(x @ kernel + bias) over the last axis. kernel (in, units), bias (units,).
LayerPtr Dense(int64_t units, std::string activation = "linear", DenseOptions options = {});

// relu, sigmoid, tanh, softmax, gelu, elu, leaky_relu, linear.
LayerPtr Activation(std::string activation, std::string name = {});
// Zeroes inputs with probability `rate` during training and scales the rest by 1/(1-rate).
LayerPtr Dropout(float rate, uint64_t seed = 0, std::string name = {});
LayerPtr Flatten(std::string name = {});
// Per-sample target shape (without the batch dimension).
LayerPtr Reshape(Shape target_shape, std::string name = {});
LayerPtr Add(std::string name = {});
LayerPtr Concatenate(int axis = -1, std::string name = {});

}  // namespace layers
}  // namespace tk
