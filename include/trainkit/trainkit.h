// trainkit: Keras-style training in C++. One include for the whole public API.
//
//   #include <trainkit/trainkit.h>
//   auto [x, y] = tk::data::load_idx_pair("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
//   tk::Sequential model({tk::layers::Input({784}), tk::layers::Dense(10, "softmax")});
//   model.compile(tk::optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
//   model.fit(x, y, {.batch_size = 128, .epochs = 5});
#pragma once
#include "trainkit/core/device.h"
#include "trainkit/core/dtype.h"
#include "trainkit/core/error.h"
#include "trainkit/core/shape.h"
#include "trainkit/core/tensor.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/idx.h"
#include "trainkit/data/stall.h"
#include "trainkit/io/keras.h"
#include "trainkit/io/tensorboard.h"
#include "trainkit/nn/adapt.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/distribute.h"
#include "trainkit/nn/keras_callbacks.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/losses.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/models.h"
#include "trainkit/nn/optimizers.h"
#include "trainkit/runtime/determinism.h"
#include "trainkit/runtime/memory.h"
