// What the noise and image preprocessing layers share (noise.cpp, random_flip.cpp, random_contrast.cpp,
// center_crop.cpp): random values, a RandomUniform or RandomNormal node (graph/op.h), float32, drawn anew each step
// from the layer's seed; and Keras' image-layer conventions (an (N, H, W, C) batch, cast to the compute dtype).
#pragma once
#include <string>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"

namespace tk::nn {

inline int random_values(CallContext& ctx, graph::Op op, Shape shape, uint64_t seed, const std::string& name) {
  graph::Attrs at;
  at.shape = std::move(shape);
  at.seed = seed;
  at.dtype = DType::f32;
  return ctx.g.add(op, {}, at, name);
}

// One uniform draw per image of the (N, H, W, C) value x: (N, 1, 1, 1).
inline int per_image_uniform(CallContext& ctx, int x, uint64_t seed, const std::string& name) {
  return random_values(ctx, graph::Op::RandomUniform, Shape{ctx.g[x].shape[0], 1, 1, 1}, seed, name);
}

// Keras' image layers take a batch of images: s itself, or InvalidArgument naming the layer for another rank.
inline const Shape& check_images(const Layer& layer, const Shape& s) {
  if (s.rank() != 4)
    throw InvalidArgument(layer.class_name() + " '" + layer.name + "': takes a batch of images (N, H, W, C), got " +
                          s.to_string());
  return s;
}

// The images in the layer's compute dtype: a non-float input (uint8 pixels) cast, as Keras' image layers do.
inline int image_input(CallContext& ctx, int x, const std::string& layer_name) {
  return is_floating(ctx.g[x].dtype) ? x : ctx.cast(x, ctx.compute, layer_name + "/cast_input");
}

}  // namespace tk::nn
