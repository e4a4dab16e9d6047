// An HDF5 file as plain data: its groups, its numeric datasets and its string attributes. Every libhdf5 call a
// load of Keras weights (.weights.h5, the model.weights.h5 inside .keras, legacy Keras 2 .h5) needs happens in one
// place, which is what lets it run in a helper process (data/hdf5_isolation.h) where a crash inside libhdf5 cannot
// take trainkit down. Loading streams: the helper reads each dataset through one bounded buffer into a data file
// (an unlinked temporary), and the caller reads each dataset from there straight into its destination
// (read_into): no copy of all weights exists in either process (docs/memory.md, "Saving and loading").
//
//   tk::io::H5Tree t = tk::io::open_h5_tree_file("m.weights.h5", "m.weights.h5");   // datasets stay in the file
//   t.read_into("layers/dense/vars/0", kernel, "m.weights.h5");                     // one tensor, into place
//   tk::io::H5Tree whole = tk::io::read_h5_tree_file("m.weights.h5");               // every dataset as a tensor
//   std::string image = tk::io::write_h5_tree(whole);   // the bytes of an HDF5 file holding the same tree
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk::io {

// A dataset's shape and element type (float -> f32, integer -> i64).
struct H5DatasetInfo {
  Shape shape;
  DType dtype = DType::f32;
};

// A dataset left in a tree's data file: its bytes (row-major, native order) at `offset`.
struct H5StoredDataset {
  H5DatasetInfo info;
  uint64_t offset = 0;
};

// The data file a tree's stored datasets are in: an unlinked temporary, closed when the last tree sharing it goes.
class H5DataFile {
 public:
  H5DataFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ~H5DataFile();
  H5DataFile(const H5DataFile&) = delete;
  H5DataFile& operator=(const H5DataFile&) = delete;
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_;
  uint64_t size_;
};

struct H5Tree {
  std::set<std::string> groups;            // "layers/dense/vars" (no leading '/'; "" = root)
  std::map<std::string, Tensor> datasets;  // float -> f32, integer -> i64
  std::map<std::string, std::map<std::string, std::vector<std::string>>> attrs;  // object -> name -> strings
  // Writing only: datasets of one repeated float32 value (optimizer slots before the first step), written by HDF5's
  // fill without a tensor of that size in memory.
  std::map<std::string, std::pair<Shape, float>> filled;
  // Loading (open_h5_tree_file): datasets the helper left in `data_file`, read on demand.
  std::map<std::string, H5StoredDataset> stored;
  std::shared_ptr<const H5DataFile> data_file;

  // A dataset held as a tensor (not a stored one), or nullptr.
  const Tensor* dataset(const std::string& path) const {
    auto it = datasets.find(path);
    return it == datasets.end() ? nullptr : &it->second;
  }
  // Shape and type of a dataset, held or stored; nullopt when there is none.
  std::optional<H5DatasetInfo> info(const std::string& path) const;
  // A dataset's values in a tensor: a held one shared, a stored one read into a new tensor tagged
  // "<label>: read of <path>" (small ones: scalars, integer weights).
  Tensor load(const std::string& path, const std::string& label) const;
  // A dataset's bytes into `dst` (its shape; f32 or i64 as stored; host or device): a stored one straight from the
  // data file into host memory, or through one bounded staging buffer into a GPU's (io/file_staging.h).
  // FormatError naming `label` when the dataset is missing or does not match `dst`.
  void read_into(const std::string& path, Tensor& dst, const std::string& label) const;
  // Every stored dataset read into `datasets` (tests and callers that want the whole tree as tensors).
  void materialize(const std::string& label);
  // A string attribute (first element), or nullptr.
  const std::string* attr(const std::string& object, const std::string& name) const;
  // Direct children of a group, in name order ("0", "1", "10", ... as HDF5 lists them).
  std::vector<std::string> children(const std::string& group) const;
};

// Reads a file's tree in the HDF5 helper process (src/data/hdf5_isolation.h): a file that crashes libhdf5
// is a FormatError here. The datasets stay in a data file (H5Tree::stored): read each with read_into. The helper
// holds one staging buffer (file_staging_capacity()) at a time; this process holds the answer's groups, attributes
// and shapes. Errors: IoError (cannot open; no room for the data file), FormatError (not HDF5, damaged: HDF5's
// innermost message), Unsupported (a dataset of strings/compound/... where numbers belong). Datasets over 1 GiB
// in total are refused with FormatError before anything is read. `label` names the file in errors and owner tags.
H5Tree open_h5_tree_file(const std::string& path, const std::string& label);
// The same with every dataset read into a tensor (H5Tree::datasets).
H5Tree read_h5_tree_file(const std::string& path);
// The same from an in-memory file image (tests).
H5Tree read_h5_tree_image(const std::string& label, const void* data, size_t size);
// The same, in this process (what the helper runs): datasets as tensors, or, when `data_path` is given, each read
// through one staging buffer and appended to that file (H5Tree::stored).
H5Tree read_h5_tree_file_in_process(const std::string& path, const std::string& label,
                                    const std::string& data_path = "");

// The helper's answer: a tree as bytes and back (held datasets with their bytes, stored ones with their offset).
// parse_h5_tree checks every length against what is there (FormatError naming `label` otherwise).
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
