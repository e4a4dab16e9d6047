// Keras' Normalization.adapt over a dataset of batches (layers.h has adapt of one array).
//
//   tk::LayerPtr norm = tk::layers::Normalization();
//   tk::layers::adapt(norm, tk::data::Dataset::from_tensor_slices({x_train}).batch(1024));   // or adapt(norm, x_train)
//
// A header of its own so that layers.h (included by every model) does not include the data pipeline's.
#pragma once
#include "trainkit/data/dataset.h"
#include "trainkit/nn/layer.h"

namespace tk::layers {

// The mean and (biased) variance of the first component of every element (Keras takes x from (x, y) elements), over
// all axes but the layer's kept ones, in one pass, merged batch by batch (in double; equal to adapt of the whole
// array). Builds the layer from the first batch's shape if needed. InvalidArgument for an empty dataset, a layer
// with a given mean and variance, or a batch of another rank or other kept-axis sizes.
void adapt(const LayerPtr& normalization, const data::Dataset& batches);

}  // namespace tk::layers
