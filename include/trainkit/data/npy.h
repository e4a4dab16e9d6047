// NumPy files: .npy (one array, format versions 1.0, 2.0 and 3.0) and .npz (a zip of .npy members, as written
// by np.savez and np.savez_compressed).
//
//   tk::Tensor x = tk::data::load_npy("x_train.npy");            // e.g. '<f8' (60000, 784) -> float32
//   tk::data::save_npy("weights.npy", x);                         // np.load("weights.npy") reads it back
//   auto arrays = tk::data::load_npz("mnist.npz");                // [("x_train", ...), ("y_train", ...), ...]
//   tk::Tensor y = tk::data::load_npz("mnist.npz", "y_train");    // one member; the error lists the keys
//   tk::data::save_npz("preds.npz", {{"class", c}, {"box", b}});  // np.load("preds.npz")["box"]
//
// Element types map to the kernels' dtypes:
//   float32 '<f4' -> f32,  float64 '<f8' -> f32 (beyond float range -> +-inf),
//   float16 '<f2' / '>f2' -> f16 (every bit kept: subnormals, NaN payloads)
//   int8 '|i1', int16 '<i2', uint16 '<u2', int32 '<i4' -> i32;  int64 '<i8', uint32 '<u4' -> i64
//   uint64 '<u8' -> i64 (a value above INT64_MAX is a FormatError);  uint8 '|u1' -> u8;  bool '|b1' -> boolean
// Big-endian ('>f4') arrays are byte-swapped and Fortran-order arrays transposed, so every result is a
// row-major (C-order) tensor of the shape the header declares. Complex, string, object (pickled), datetime,
// raw-byte ('<V2', which is how NumPy stores ml_dtypes' bfloat16) and structured dtypes are rejected with a
// FormatError that says so.
//
// Errors: tk::IoError (cannot open, read or write) or tk::FormatError (the contents are wrong; the message
// names the file, the .npz member if any, and the byte offset). The data length is checked against the
// header before anything is allocated.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk::data {

Tensor load_npy(const std::string& path);

// Writes format version 1.0 (little-endian, C order; float16 as '<f2') to path + ".tmp", then renames it to
// path, so a reader never sees a half-written file. bfloat16 has no standard NumPy dtype: tk::Unsupported
// (convert it to float32 first).
void save_npy(const std::string& path, const Tensor& tensor);

// Writes an uncompressed .npz (as np.savez does): one "<key>.npy" member per array, in order, each streamed from
// the tensor's own memory (no copy of the arrays is made), to path + ".tmp" and then renamed to path. Keys must be
// unique, non-empty and without '/'; the dtype rules are save_npy's.
void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays);

// Every member, in archive order; keys are member names without ".npy" (np.savez's "arr_0", or the keyword).
std::vector<std::pair<std::string, Tensor>> load_npz(const std::string& path);

// One member by key ("x" or "x.npy"); a missing key is a tk::InvalidArgument that lists the keys present.
Tensor load_npz(const std::string& path, const std::string& key);

}  // namespace tk::data
