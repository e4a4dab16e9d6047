// Keras masks as graph values (nn::MaskSupport in nn/layers/context.h): a float32 (N, steps) value of 1 where a
// step is real and 0 where it is padding (Keras' boolean mask as 0/1: float32 values slice, reshape and concatenate on
// every backend, and AND / OR are a product / a maximum). Built from the general ops (Compare, Cast, Mul, Where), so
// whatever a mask gates gets its gradient from autodiff (the mask itself has none).
#pragma once
#include <string>

#include "graph/graph.h"
#include "trainkit/nn/layer.h"

namespace tk::nn::masks {

// 1 where x != value, else 0, of x's shape (integer token ids are compared as float32: exact below 2^24).
int not_equal(graph::OpBuilder& b, int x, float value);
// The mask as 0/1 in `dtype` (a product with values of that dtype).
int as(graph::OpBuilder& b, int mask, DType dtype);
// The boolean a Where takes: mask > 0.5.
int condition(graph::OpBuilder& b, int mask);
// Keras' logical_and / logical_or of two masks of one shape.
int logical_and(graph::OpBuilder& b, int a, int c);
int logical_or(graph::OpBuilder& b, int a, int c);
// any(mask, axis=-1) of (..., k): (...).
int any_last(graph::OpBuilder& b, int mask);
// x where mask (N, T) is 1, `fill` elsewhere, for x (N, T, ...): the mask broadcast over x's trailing axes.
int select(graph::OpBuilder& b, int mask, int x, float fill);
// Keras' causal mask (T, S) as a bool: query step i sees key step j when j <= i (MultiHeadAttention's and
// Attention's use_causal_mask).
int causal(graph::OpBuilder& b, int64_t t, int64_t s);

}  // namespace tk::nn::masks
