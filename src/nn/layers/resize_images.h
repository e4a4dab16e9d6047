// Keras' image resize as a model computes it (keras.ops.image.resize, antialias=False), shared by the Resizing layer,
// UpSampling2D(interpolation="bilinear") and CenterCrop on images smaller than its crop (Keras' smart_resize).
#pragma once
#include <string>

#include "nn/layers/context.h"

namespace tk::nn {

struct ResizeImages {
  int64_t height = 0, width = 0;
  bool bilinear = true;  // or nearest
  // Keras' crop_to_aspect_ratio: first the largest central window of the target's aspect ratio; pad_to_aspect_ratio:
  // first fill_value bands on both sides of the short axis (Keras pads one axis, the height if it is short).
  bool crop_to_aspect_ratio = false, pad_to_aspect_ratio = false;
  float fill_value = 0.0f;
};

// x (N, H, W, C) float -> (N, height, width, C).
int resize_images(CallContext& ctx, int x, const ResizeImages& r, const std::string& name);

}  // namespace tk::nn
