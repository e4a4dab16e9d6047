// Writing H5Trees (hdf5_tree.h): to a file, streaming each dataset from its tensor's memory, or to an in-memory
// image. Writing happens in this process (trainkit's own trees, never a damaged input).
#include <hdf5.h>

#include <mutex>
#include <vector>

#include "io/file_staging.h"
#include "io/hdf5_blocks.h"
#include "io/hdf5_handle.h"
#include "io/hdf5_tree.h"
#include "trainkit/core/error.h"

namespace tk::io {
namespace {

using Handle = Hdf5Handle;

class TreeWriter {
 public:
  TreeWriter(hid_t file, std::string label, size_t piece_bytes = 0)
      : file_(file), label_(std::move(label)), piece_bytes_(piece_bytes) {}

  void write(const H5Tree& tree) {
    for (const std::string& g : tree.groups)  // std::set order: parents before children
      if (!g.empty()) {
        Handle h(H5Gcreate2(file_, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
        if (h.id < 0) fail("group " + g);
      }
    for (const auto& [path, t] : tree.datasets) dataset(path, t);
    for (const auto& [path, fill] : tree.filled) filled(path, fill.first, fill.second);
    for (const auto& [object, named] : tree.attrs) {
      const bool is_dataset = tree.datasets.count(object) || tree.filled.count(object);
      Handle obj(is_dataset ? H5Dopen2(file_, object.c_str(), H5P_DEFAULT)
                            : H5Gopen2(file_, object.empty() ? "/" : object.c_str(), H5P_DEFAULT),
                 is_dataset ? H5Dclose : H5Gclose);
      if (obj.id < 0) fail("attributes of " + object);
      for (const auto& [name, values] : named) attribute(obj.id, name, values);
    }
    if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) fail("flush");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(label_ + ": cannot write " + what + ": " + hdf5_innermost_error() + " (is the disk full?)");
  }

  static std::vector<hsize_t> dims_of(const Shape& s) {
    std::vector<hsize_t> dims;
    for (int i = 0; i < s.rank(); ++i) dims.push_back(static_cast<hsize_t>(s[i]));
    return dims;
  }
  static hid_t space_of(const std::vector<hsize_t>& dims) {
    return dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  }

  // The tensor's bytes go to the file from its own memory (a host tensor: one H5Dwrite), or in blocks of whole
  // rows of its trailing dimensions through one staging buffer (a device tensor, io/file_staging.h).
  void dataset(const std::string& path, const Tensor& t) {
    const bool integer = t.dtype() == DType::i64 || t.dtype() == DType::i32;
    if (!integer && t.dtype() != DType::f32) throw InvalidArgument(label_ + ": dataset '" + path + "' is not float32");
    const hid_t file_type = integer ? (t.dtype() == DType::i64 ? H5T_STD_I64LE : H5T_STD_I32LE) : H5T_IEEE_F32LE;
    const hid_t mem_type = integer ? (t.dtype() == DType::i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32) : H5T_NATIVE_FLOAT;
    const std::vector<hsize_t> dims = dims_of(t.shape());
    Handle space(space_of(dims), H5Sclose);
    Handle d(H5Dcreate2(file_, path.c_str(), file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (d.id < 0) fail("dataset " + path);
    if (t.numel() == 0) return;
    TensorBytes bytes(t, label_, path, piece_bytes_);
    const size_t element = dtype_size(t.dtype());
    if (t.nbytes() <= bytes.capacity()) {  // the whole tensor at once
      if (H5Dwrite(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.range(0, t.nbytes())) < 0) fail(path);
      return;
    }
    for_each_block(dims, element, bytes.capacity(),
                   [&](const hsize_t* start, const hsize_t* count, size_t offset, size_t elements) {
                     const hsize_t n = elements;
                     Handle mem(H5Screate_simple(1, &n, nullptr), H5Sclose);
                     if (H5Sselect_hyperslab(space.id, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0)
                       fail(path + " (selection)");
                     if (H5Dwrite(d.id, mem_type, mem.id, space.id, H5P_DEFAULT, bytes.range(offset, n * element)) < 0)
                       fail(path);
                   });
  }

  // One value everywhere: HDF5 writes the fill value when it allocates the dataset's space.
  void filled(const std::string& path, const Shape& shape, float value) {
    const std::vector<hsize_t> dims = dims_of(shape);
    Handle space(space_of(dims), H5Sclose);
    Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    if (H5Pset_fill_value(dcpl.id, H5T_NATIVE_FLOAT, &value) < 0 ||
        H5Pset_alloc_time(dcpl.id, H5D_ALLOC_TIME_EARLY) < 0 || H5Pset_fill_time(dcpl.id, H5D_FILL_TIME_ALLOC) < 0)
      fail(path + " (fill value)");
    Handle d(H5Dcreate2(file_, path.c_str(), H5T_IEEE_F32LE, space.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT), H5Dclose);
    if (d.id < 0) fail("dataset " + path);
  }

  void attribute(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    if (H5Tset_size(type.id, H5T_VARIABLE) < 0 || H5Tset_cset(type.id, H5T_CSET_UTF8) < 0) fail("string type");
    const hsize_t n = values.size();
    Handle space(values.size() == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
    Handle a(H5Acreate2(obj, name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (a.id < 0) fail("attribute " + name);
    std::vector<const char*> ptrs;
    for (const std::string& v : values) ptrs.push_back(v.c_str());
    if (H5Awrite(a.id, type.id, ptrs.data()) < 0) fail("attribute " + name);
  }

  hid_t file_;
  std::string label_;
  size_t piece_bytes_;
};

}  // namespace

std::string write_h5_tree(const H5Tree& tree) {
  std::lock_guard lock(hdf5_library_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (H5Pset_fapl_core(fapl.id, 1 << 16, 0) < 0) throw Error("writing HDF5: core driver: " + hdf5_innermost_error());
  Handle file(H5Fcreate("trainkit-image.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id), H5Fclose);
  if (file.id < 0) throw Error("writing HDF5: create: " + hdf5_innermost_error());
  TreeWriter(file.id, "HDF5 image").write(tree);
  const ssize_t size = H5Fget_file_image(file.id, nullptr, 0);
  if (size < 0) throw Error("writing HDF5: file image size: " + hdf5_innermost_error());
  std::string out(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file.id, out.data(), out.size()) < 0)
    throw Error("writing HDF5: file image: " + hdf5_innermost_error());
  return out;
}

void write_h5_tree_file(const H5Tree& tree, const std::string& path, const std::string& label, size_t piece_bytes) {
  std::lock_guard lock(hdf5_library_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) throw IoError(label + ": cannot create " + path + ": " + hdf5_innermost_error());
  TreeWriter(file.id, label, piece_bytes).write(tree);
  if (H5Fclose(file.id) < 0) {
    file.id = -1;
    throw IoError(label + ": cannot finish " + path + ": " + hdf5_innermost_error() + " (is the disk full?)");
  }
  file.id = -1;
}

}  // namespace tk::io
