// Random values for the training-only noise and augmentation layers (noise.cpp, random_flip.cpp): a RandomUniform or
// RandomNormal node (graph/op.h), float32, drawn anew each step from the layer's seed.
#pragma once
#include <string>

#include "nn/layers/context.h"

namespace tk::nn {

inline int random_values(CallContext& ctx, graph::Op op, Shape shape, uint64_t seed, const std::string& name) {
  graph::Attrs at;
  at.shape = std::move(shape);
  at.seed = seed;
  at.dtype = DType::f32;
  return ctx.g.add(op, {}, at, name);
}

}  // namespace tk::nn
