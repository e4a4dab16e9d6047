// Named models.
//
//   auto model = tk::models::tutorial_cnn();   // for (28, 28) grayscale images, 10 classes
//   model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
//                  {"accuracy"});
#pragma once
#include <memory>

#include "trainkit/nn/model.h"

namespace tk::models {

// The CNN of TensorFlow's "Build a CNN" tutorial (layers API):
// conv(32, 5x5, same, relu) -> maxpool 2 -> conv(64, 5x5, same, relu) -> maxpool 2 -> dense(1024, relu)
// -> dropout(0.4) -> dense(classes) (logits). `input` is (height, width) or (height, width, channels).
// input_scale != 1: a Rescaling(input_scale) first (e.g. 1/255 for uint8 images, scaled at staging).
std::unique_ptr<Sequential> tutorial_cnn(Shape input = {28, 28}, int64_t classes = 10, float input_scale = 1.0f);

}  // namespace tk::models
