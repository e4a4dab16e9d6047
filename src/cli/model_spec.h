// The CLI's short model spec: the layers after the input, comma-separated.
//
//   trainkit fit --model dense:512:relu,dropout:0.2,dense:10
//   trainkit fit --model conv2d:32:3:relu,maxpool:2,batchnorm,conv2d:64:3:relu,globalavgpool,dense:10
//   trainkit fit --replicas 2 --model conv2d:32:3,batchnorm:sync,activation:relu,flatten,dense:10
#pragma once
#include <string>
#include <vector>

#include "trainkit/nn/layers.h"

namespace tk::cli {

// Items (Keras' defaults where an argument is left out):
//   dense:UNITS[:ACTIVATION]                Dense
//   conv2d:FILTERS:KERNEL[:ACTIVATION[:PADDING]]  Conv2D, a square KERNEL, padding valid or same
//   dwconv2d:KERNEL[:ACTIVATION[:PADDING[:MULTIPLIER]]]  DepthwiseConv2D (depth_multiplier MULTIPLIER, 1)
//   sepconv2d:FILTERS:KERNEL[:ACTIVATION[:PADDING]]      SeparableConv2D
//   maxpool[:SIZE], avgpool[:SIZE]         MaxPooling2D, AveragePooling2D (SIZE 2)
//   globalavgpool, globalmaxpool           GlobalAveragePooling2D, GlobalMaxPooling2D
//   batchnorm[:sync]                       BatchNormalization (sync: synchronized over the replicas)
//   dropout:RATE, activation:NAME, flatten
// Sequences (batch, steps, channels), e.g. a text CNN on token ids: embedding:64:16,conv1d:32:5:relu,globalmaxpool1d
//   embedding:INPUT_DIM:OUTPUT_DIM         Embedding (first: the input is int32 token ids, (steps,) per sample)
//   conv1d:FILTERS:KERNEL[:ACTIVATION[:PADDING]]  Conv1D, padding valid, same or causal
//   maxpool1d[:SIZE], avgpool1d[:SIZE]     MaxPooling1D, AveragePooling1D (SIZE 2)
//   globalavgpool1d, globalmaxpool1d       GlobalAveragePooling1D, GlobalMaxPooling1D
//   relu[:MAX_VALUE], leakyrelu[:SLOPE], elu[:ALPHA], prelu, softmax[:AXIS]   ReLU (relu:6 = ReLU(max_value=6)),
//                                          LeakyReLU (0.3), ELU (1.0), PReLU, Softmax (-1)
// Throws InvalidArgument naming the item and its position.
std::vector<LayerPtr> parse_model_spec(const std::string& spec);

// Whether the spec's layers take images (N, H, W, C) (its first layer is a convolution or a pooling layer): the CLI
// then gives a grayscale (H, W) input a channel axis instead of flattening it.
bool model_spec_takes_images(const std::vector<LayerPtr>& layers);
// Whether the spec starts with an Embedding: the CLI's input is then int32 token ids of the data's sample shape.
bool model_spec_takes_tokens(const std::vector<LayerPtr>& layers);

}  // namespace tk::cli
