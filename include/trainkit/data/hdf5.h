// HDF5 files (h5py, Keras, PyTables, ...) through the HDF5 C library: list, load, read rows, stream rows.
//
//   for (const tk::data::Hdf5DatasetInfo& d : tk::data::list_hdf5("train.h5"))
//     std::cout << d.path << " " << d.shape.to_string() << "\n";           // "/train/x (60000, 28, 28)"
//   tk::Tensor y = tk::data::load_hdf5("train.h5", "/train/y");            // the whole dataset
//   tk::Tensor head = tk::data::read_hdf5_rows("train.h5", "/train/x", 0, 32);  // rows [0, 32) of dim 0
//   auto reader = tk::data::open_hdf5("train.h5", {"/train/x", "/train/y"});  // streams rows, bounded memory
//   tk::data::Element row;
//   while (reader->next(row)) { /* row[0]: x[i] of shape (28, 28), row[1]: y[i] of shape () */ }
//
// Element types: float32 -> f32, float64 (and other float sizes and layouts) -> f32, IEEE float16 (either
// byte order; every bit kept) -> f16, bfloat16 -> bf16 (both recognised by their bit layout: libhdf5 1.10
// has no predefined 16-bit float types);
// int8, int16, int32, uint16 -> i32; int64, uint32 -> i64; uint8 -> u8; h5py's bool (an enum FALSE/TRUE of
// int8) -> boolean. Everything else (strings, compound, variable-length, other enums, uint64, ...) throws
// tk::Unsupported naming the dataset and its type; list_hdf5 still lists such datasets.
//
// Errors: tk::IoError (cannot open or read the file), tk::FormatError (not HDF5, truncated or damaged: the
// message names the file, the dataset and, where known, the byte offset, plus HDF5's own innermost error),
// tk::InvalidArgument (no such dataset: the message lists those that exist; rows out of range; datasets
// with different row counts), tk::Unsupported (element type or compression filter).
//
// Thread safety: every function may be called from several threads at once. HDF5 calls are serialized by
// one process-wide lock, so readers on different threads take turns inside the library.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/data/reader.h"

namespace tk::data {

struct Hdf5DatasetInfo {
  std::string path;            // absolute, "/train/x"
  Shape shape;                 // () for a scalar dataset
  DType dtype = DType::f32;    // what load_hdf5 returns; meaningless when !supported
  std::vector<int64_t> chunk;  // chunk dimensions; empty for contiguous or compact storage
  bool supported = true;       // false: loading it throws tk::Unsupported (see hdf5_type)
  std::string hdf5_type;       // the stored type: "float64", "int16", "bool", "fixed-length string", ...
};

// Every dataset in the file, found recursively through hard links, sorted by path. Soft and external
// links are not followed.
std::vector<Hdf5DatasetInfo> list_hdf5(const std::string& file);

// The whole dataset as one tensor (its shape; () for a scalar). Refuses datasets over 4 GiB in memory
// before allocating (stream those with open_hdf5). `dataset` may omit the leading '/'.
Tensor load_hdf5(const std::string& file, const std::string& dataset);

// Rows [begin, begin + count) along dimension 0, read with a hyperslab selection: shape (count, ...).
Tensor read_hdf5_rows(const std::string& file, const std::string& dataset, int64_t begin, int64_t count);

// An open file, for several reads without reopening it. Move-only; closing happens in the destructor.
class Hdf5File {
 public:
  explicit Hdf5File(const std::string& path);
  ~Hdf5File();
  Hdf5File(Hdf5File&&) noexcept;
  Hdf5File& operator=(Hdf5File&&) noexcept;
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& path() const;
  std::vector<Hdf5DatasetInfo> list() const;
  Hdf5DatasetInfo info(const std::string& dataset) const;
  Tensor load(const std::string& dataset) const;
  Tensor read_rows(const std::string& dataset, int64_t begin, int64_t count) const;

 private:
  friend class Hdf5Reader;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streams rows in order: element i holds row i of each named dataset (shape: the dataset's shape without
// dimension 0). All datasets must have the same number of rows. Rows are read in blocks of
// `rows_per_read` rows per dataset (0: whole chunks adding up to about 1 MiB for a chunked dataset, about
// 1 MiB of rows otherwise), each into one reused buffer, so memory stays bounded whatever the file's size;
// HDF5's chunk cache is also kept small (at most 8 MiB per dataset).
class Hdf5Reader final : public ElementReader {
 public:
  Hdf5Reader(const std::string& file, std::vector<std::string> datasets, int64_t rows_per_read = 0);
  ~Hdf5Reader() override;
  Hdf5Reader(const Hdf5Reader&) = delete;
  Hdf5Reader& operator=(const Hdf5Reader&) = delete;

  bool next(Element& out) override;
  std::string position() const override;  // "HDF5 file 'train.h5' row 1042 of 60000"

  int64_t rows() const;                         // rows in each dataset
  int64_t rows_per_read(size_t dataset) const;  // block size chosen for datasets[dataset]
  size_t peak_block_bytes() const;              // bytes of the block buffers, all datasets together

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<ElementReader> open_hdf5(const std::string& file, std::vector<std::string> datasets,
                                         int64_t rows_per_read = 0);

}  // namespace tk::data
