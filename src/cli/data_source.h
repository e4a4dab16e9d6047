// `trainkit fit --data FILE`: training and validation data from IDX, CSV, NPY/NPZ, HDF5 or TFRecord files,
// as a Dataset of (x float32, y integer) elements, unbatched.
//
//   --data train.csv  --y label [--x f0,f1,f2]          CSV: label column; feature columns (default: the rest)
//   --data train.npz  [--x x] [--y y]                    NPZ: array keys (defaults x, y)
//   --data x.npy      --y y.npy                          NPY: features file, labels file
//   --data train.h5   [--x /train/x] [--y /train/y]      HDF5: dataset paths (defaults x, y), streamed
//   --data train.tfrecord --x image:28x28 [--y label]    TFRecord: feature NAME[:DIMS[:DTYPE]], label (int64)
//   --data images.idx3-ubyte.gz --y labels.idx1-ubyte.gz IDX: images file, labels file
// TFRecord files may be GZIP- or ZLIB-compressed (TFRecordOptions), told from their first bytes, not their name.
// Integer features (uint8 pixels) are scaled to [0, 1] as Keras' tutorials do.
#pragma once
#include <string>
#include <vector>

#include "trainkit/data/dataset.h"

namespace tk::cli {

struct DataArgs {
  std::string format = "auto";  // auto (from the extension), idx, csv, npy, npz, hdf5, tfrecord
  std::string x, y;             // meaning depends on the format (above)
};

// `s` cut at every `sep` ("a,,b" -> a, "", b; "" -> one empty piece): --model items, CSV columns, dimensions.
std::vector<std::string> split(const std::string& s, char sep);

// Features in their own dtype (uint8 pixels stay uint8: 1 byte per pixel in memory, not 4); each batch is
// converted as it is staged into the program.
Tensor as_features(const Tensor& t);
// The Rescaling the model starts with for features of this dtype: 1/255 for uint8 pixels (Keras' tutorials),
// else 1 (none).
float feature_scale(DType t);

// "csv", "npz", ... for a path and a --format value; InvalidArgument naming the path when unknown.
std::string data_format(const std::string& path, const std::string& format);

// The file's samples as (x float32 (...), y int32 ()) elements. `option` names the flag in errors.
data::Dataset open_data_file(const std::string& path, const DataArgs& args, const std::string& option);
// Features alone, (x) elements, for `trainkit predict` (no labels needed): an NPY or IDX file is the features
// itself; NPZ key / HDF5 dataset --x (default x); CSV columns --x (default all); TFRecord feature --x.
data::Dataset open_features_file(const std::string& path, const DataArgs& args, const std::string& option);

}  // namespace tk::cli
