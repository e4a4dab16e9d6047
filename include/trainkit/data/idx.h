// IDX files (the MNIST / Fashion-MNIST format), plain or gzipped: the reader detects which.
//
//   tk::Tensor x = tk::data::load_idx("train-images-idx3-ubyte.gz");   // uint8 (60000, 28, 28)
//   auto [images, labels] = tk::data::load_idx_pair("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte");
//   tk::data::FashionMnist d = tk::data::load_fashion_mnist();         // from default_fashion_mnist_dir()
//   d.x_train;  // float32 (60000, 28, 28) in [0, 1];  d.y_train: uint8 (60000,)
//
// Every problem with a file throws tk::IoError (cannot open or read) or tk::FormatError (the contents are
// wrong); the message names the file and the byte offset (in the decompressed stream for a gzipped file).
#pragma once
#include <string>
#include <utility>

#include "trainkit/core/tensor.h"

namespace tk::data {

// Reads one IDX file. Element types map to the kernels' dtypes: uint8 -> u8; int8, int16, int32 -> i32;
// float32, float64 -> f32. Files whose data would exceed 4 GiB are rejected before anything is allocated.
Tensor load_idx(const std::string& path);

// Loads an images file and its labels file; throws InvalidArgument when their first dimensions differ.
std::pair<Tensor, Tensor> load_idx_pair(const std::string& images, const std::string& labels);

struct FashionMnist {
  Tensor x_train;  // float32 (60000, 28, 28), pixels / 255 (or uint8 0..255: scale_to_float false)
  Tensor y_train;  // uint8 (60000,), classes 0..9
  Tensor x_test;   // float32 (10000, 28, 28)
  Tensor y_test;   // uint8 (10000,)
};

// $TK_FASHION_MNIST_DIR if set, else /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist).
std::string default_fashion_mnist_dir();

// Loads the four files from dir; each may be gzipped (name.gz) or plain (name). scale_to_float false keeps
// the images uint8 (0..255, a quarter of the memory; train with a Rescaling(1/255) first layer, which scales
// each batch as it is staged).
FashionMnist load_fashion_mnist(const std::string& dir = default_fashion_mnist_dir(), bool scale_to_float = true);

}  // namespace tk::data
