// An HDF5 file as plain data: its groups, its numeric datasets (as tensors) and its string attributes.
// Keras weights (.weights.h5, the model.weights.h5 inside .keras, legacy Keras 2 .h5) are small trees read
// whole, so every libhdf5 call a load needs happens in one place — which is what lets it run in a helper
// process (hdf5_helper.h) where a crash inside libhdf5 cannot take trainkit down.
//
//   tk::io::H5Tree t = tk::io::read_h5_tree_file("m.weights.h5");
//   const tk::Tensor* k = t.dataset("layers/dense/vars/0");
//   std::string image = tk::io::write_h5_tree(t);   // the bytes of an HDF5 file holding the same tree
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk::io {

struct H5Tree {
  std::set<std::string> groups;            // "layers/dense/vars" (no leading '/'; "" = root)
  std::map<std::string, Tensor> datasets;  // float -> f32, integer -> i64
  std::map<std::string, std::map<std::string, std::vector<std::string>>> attrs;  // object -> name -> strings
  // Writing only: datasets of one repeated float32 value (optimizer slots before the first step), written by HDF5's
  // fill without a tensor of that size in memory.
  std::map<std::string, std::pair<Shape, float>> filled;

  const Tensor* dataset(const std::string& path) const {
    auto it = datasets.find(path);
    return it == datasets.end() ? nullptr : &it->second;
  }
  // A string attribute (first element), or nullptr.
  const std::string* attr(const std::string& object, const std::string& name) const;
  // Direct children of a group, in name order ("0", "1", "10", ... as HDF5 lists them).
  std::vector<std::string> children(const std::string& group) const;
};

// Reads a whole file, in the HDF5 helper process (src/data/hdf5_isolation.h): a file that crashes libhdf5
// is a FormatError here. Errors: IoError (cannot open), FormatError (not HDF5,
// damaged: HDF5's innermost message), Unsupported (a dataset of strings/compound/... where numbers belong).
// Datasets over 1 GiB in total are refused with FormatError before allocating.
H5Tree read_h5_tree_file(const std::string& path);
// The same from an in-memory file image (e.g. a zip member).
H5Tree read_h5_tree_image(const std::string& label, const void* data, size_t size);
// The same, in this process (what the helper runs).
H5Tree read_h5_tree_file_in_process(const std::string& path, const std::string& label);

// The helper's answer: a tree as bytes and back. parse_h5_tree checks every length against what is there
// (FormatError naming `label` otherwise).
std::string serialize_h5_tree(const H5Tree& tree);
H5Tree parse_h5_tree(const std::string& bytes, const std::string& label);

// An HDF5 file image holding `tree` (datasets f32 or i64 as given; attributes as variable-length strings).
// (hdf5_write.cpp; small trees: the image is in memory, tests build damaged files from it.)
std::string write_h5_tree(const H5Tree& tree);
// The same written to the file `path` (a temporary the caller commits: atomic_file.h), each dataset from the
// tensor's own memory, or, for a tensor in a GPU's memory, through one bounded staging buffer (io/file_staging.h):
// no copy of the tree's datasets is made. `label` names the file in errors and owner tags. IoError (disk full,
// naming `label`) when the file cannot be written.
// piece_bytes > 0: at most that many bytes per write, host tensors too (tests: the pieces a GPU's tensor is written
// in).
void write_h5_tree_file(const H5Tree& tree, const std::string& path, const std::string& label, size_t piece_bytes = 0);

// libhdf5 is not thread-safe as Debian builds it: every call in this process holds this mutex.
std::mutex& hdf5_library_mutex();
// HDF5's innermost error message ("HDF5: ..."), clearing its error stack.
std::string hdf5_innermost_error();

}  // namespace tk::io
