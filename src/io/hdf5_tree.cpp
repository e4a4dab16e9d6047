// Reads and writes whole HDF5 trees through the HDF5 C library (see hdf5_tree.h).
#include "io/hdf5_tree.h"

#include <hdf5.h>

#include <cstring>
#include <functional>
#include <mutex>

#include "trainkit/core/error.h"

namespace tk::io {

const std::string* H5Tree::attr(const std::string& object, const std::string& name) const {
  auto o = attrs.find(object);
  if (o == attrs.end()) return nullptr;
  auto a = o->second.find(name);
  return a == o->second.end() || a->second.empty() ? nullptr : &a->second.front();
}

std::vector<std::string> H5Tree::children(const std::string& group) const {
  const std::string prefix = group.empty() ? "" : group + "/";
  std::set<std::string> out;
  auto take = [&](const std::string& p) {
    if (p.size() <= prefix.size() || p.compare(0, prefix.size(), prefix) != 0) return;
    std::string rest = p.substr(prefix.size());
    if (rest.find('/') == std::string::npos) out.insert(rest);
  };
  for (const std::string& g : groups) take(g);
  for (const auto& [p, t] : datasets) take(p);
  return {out.begin(), out.end()};
}

namespace {

constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 30;

std::mutex& h5_mutex() {
  static std::mutex mu;
  return mu;
}

// Closes an HDF5 handle of any kind when it goes out of scope.
struct Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id >= 0 && close) close(id);
  }
};

std::string innermost_error() {
  std::string inner;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (s->empty() && e->desc && *e->desc) *s = e->desc;
        return 0;
      },
      &inner);
  H5Eclear2(H5E_DEFAULT);
  for (char& c : inner)
    if (c == '\n' || c == '\r') c = ' ';
  return inner.empty() ? std::string("HDF5 reported a failure without details") : "HDF5: " + inner;
}

[[noreturn]] void damaged(const std::string& label, const std::string& what) {
  throw FormatError(label + ": " + what + ": " + innermost_error() +
                    " (the file is damaged or was not written completely; save it again)");
}

class Reader {
 public:
  Reader(std::string label, H5Tree& out) : label_(std::move(label)), out_(out) {}

  void group(hid_t gid, const std::string& path) {
    out_.groups.insert(path);
    attributes(gid, path);
    std::vector<std::string> names;
    if (H5Literate(gid, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names) < 0)
      damaged(label_, "cannot list group '/" + path + "'");
    for (const std::string& n : names) {
      const std::string child = path.empty() ? n : path + "/" + n;
      H5L_info_t li;
      if (H5Lget_info(gid, n.c_str(), &li, H5P_DEFAULT) < 0) damaged(label_, "cannot read link '/" + child + "'");
      if (li.type != H5L_TYPE_HARD) continue;  // soft and external links are not followed
      if (++objects_ > 100000) throw FormatError(label_ + ": more than 100000 objects (not a Keras weights file)");
      Handle obj(H5Oopen(gid, n.c_str(), H5P_DEFAULT), H5Oclose);
      if (obj.id < 0) damaged(label_, "cannot open '/" + child + "'");
      const H5I_type_t kind = H5Iget_type(obj.id);
      if (kind == H5I_GROUP) {
        if (depth_ > 32) throw FormatError(label_ + ": groups nested deeper than 32 at '/" + child + "'");
        ++depth_;
        group(obj.id, child);
        --depth_;
      } else if (kind == H5I_DATASET) {
        dataset(obj.id, child);
      }
    }
  }

 private:
  static herr_t collect(hid_t, const char* name, const H5L_info_t*, void* data) {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    } catch (...) {
      return -1;
    }
    return 0;
  }

  void attributes(hid_t obj, const std::string& path) {
    struct Ctx {
      Reader* self;
      const std::string* path;
      std::string error;
    } ctx{this, &path, {}};
    auto cb = [](hid_t loc, const char* name, const H5A_info_t*, void* data) -> herr_t {
      auto* c = static_cast<Ctx*>(data);
      try {
        c->self->attribute(loc, name, *c->path);
      } catch (const std::exception& e) {
        c->error = e.what();
        return -1;
      }
      return 0;
    };
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &ctx) < 0) {
      if (!ctx.error.empty()) throw FormatError(ctx.error);
      damaged(label_, "cannot list the attributes of '/" + path + "'");
    }
  }

  // String attributes only (scalar or 1-D, fixed or variable length); others are skipped.
  void attribute(hid_t loc, const char* name, const std::string& path) {
    Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
    if (a.id < 0) damaged(label_, std::string("cannot open attribute '") + name + "' of '/" + path + "'");
    Handle type(H5Aget_type(a.id), H5Tclose);
    if (type.id < 0 || H5Tget_class(type.id) != H5T_STRING) return;
    Handle space(H5Aget_space(a.id), H5Sclose);
    const int rank = space.id < 0 ? -1 : H5Sget_simple_extent_ndims(space.id);
    if (rank < 0 || rank > 1) return;
    const hssize_t n = H5Sget_simple_extent_npoints(space.id);
    if (n < 0 || n > 100000) throw FormatError(label_ + ": attribute '" + name + "' of '/" + path + "' is too large");
    std::vector<std::string> values;
    if (H5Tis_variable_str(type.id) > 0) {
      Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mem.id, H5T_VARIABLE);
      H5Tset_cset(mem.id, H5Tget_cset(type.id));  // h5py writes UTF-8; ASCII <-> UTF-8 has no conversion
      std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
      if (H5Aread(a.id, mem.id, ptrs.data()) < 0) damaged(label_, std::string("cannot read attribute '") + name + "'");
      for (char* p : ptrs) values.emplace_back(p ? p : "");
      H5Dvlen_reclaim(mem.id, space.id, H5P_DEFAULT, ptrs.data());
    } else {
      const size_t len = H5Tget_size(type.id);
      if (len == 0 || len > (1u << 20)) throw FormatError(label_ + ": attribute '" + name + "' has a bad string size");
      std::vector<char> buf(len * static_cast<size_t>(n) + 1, 0);
      if (H5Aread(a.id, type.id, buf.data()) < 0) damaged(label_, std::string("cannot read attribute '") + name + "'");
      for (hssize_t i = 0; i < n; ++i) {
        const char* p = buf.data() + static_cast<size_t>(i) * len;
        values.emplace_back(p, strnlen(p, len));
      }
    }
    out_.attrs[path][name] = std::move(values);
  }

  void dataset(hid_t d, const std::string& path) {
    attributes(d, path);
    Handle type(H5Dget_type(d), H5Tclose);
    if (type.id < 0) damaged(label_, "cannot read the type of dataset '/" + path + "'");
    const H5T_class_t cls = H5Tget_class(type.id);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
      throw Unsupported(label_ + ": dataset '/" + path + "' does not hold numbers (Keras weights are float arrays)");
    Handle space(H5Dget_space(d), H5Sclose);
    if (space.id < 0) damaged(label_, "cannot read the shape of dataset '/" + path + "'");
    const int rank = H5Sget_simple_extent_ndims(space.id);
    if (rank < 0 || rank > 8) throw FormatError(label_ + ": dataset '/" + path + "' has a bad rank");
    hsize_t dims[8] = {};
    if (rank > 0 && H5Sget_simple_extent_dims(space.id, dims, nullptr) < 0)
      damaged(label_, "cannot read the shape of dataset '/" + path + "'");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (int i = 0; i < rank; ++i) {
      if (dims[i] > kMaxTotalBytes) throw FormatError(label_ + ": dataset '/" + path + "' has an impossible shape");
      numel *= dims[i];
      if (numel > kMaxTotalBytes) break;
      shape.push_back(static_cast<int64_t>(dims[i]));
    }
    const DType dt = cls == H5T_FLOAT ? DType::f32 : DType::i64;
    total_ += numel * (dt == DType::f32 ? 4 : 8);
    if (numel > kMaxTotalBytes || total_ > kMaxTotalBytes)
      throw FormatError(label_ + ": dataset '/" + path + "' would take the file's weights past 1 GiB (damaged?)");
    Tensor t(Shape(shape), dt);
    if (numel > 0 &&
        H5Dread(d, dt == DType::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
      damaged(label_, "cannot read dataset '/" + path + "'");
    out_.datasets[path] = std::move(t);
  }

  std::string label_;
  H5Tree& out_;
  int depth_ = 0;
  int objects_ = 0;
  uint64_t total_ = 0;
};

H5Tree read_open_file(const std::string& label, hid_t file) {
  H5Tree t;
  Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);
  if (root.id < 0) damaged(label, "cannot open the root group");
  Reader(label, t).group(root.id, "");
  return t;
}

void check(herr_t s, const char* what) {
  if (s < 0) throw Error(std::string("writing HDF5: ") + what + ": " + innermost_error());
}

}  // namespace

H5Tree read_h5_tree_file(const std::string& path) {
  std::lock_guard lock(h5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    throw IoError(path + ": cannot open: " + std::strerror(errno) + " (check the path)");
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw FormatError(path + ": not an HDF5 file (no HDF5 signature; expected a Keras .weights.h5 or .h5 file)");
  }
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) damaged(path, "cannot open");
  return read_open_file(path, file.id);
}

H5Tree read_h5_tree_image(const std::string& label, const void* data, size_t size) {
  std::lock_guard lock(h5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  if (size < 8 || std::memcmp(data, kSignature, 8) != 0)
    throw FormatError(label + ": not an HDF5 file (no HDF5 signature at byte 0)");
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_fapl_core(fapl.id, 1 << 16, 0), "core driver");
  // The library copies the image (no callbacks): `data` stays the caller's.
  check(H5Pset_file_image(fapl.id, const_cast<void*>(data), size), "file image");
  Handle file(H5Fopen(label.c_str(), H5F_ACC_RDONLY, fapl.id), H5Fclose);
  if (file.id < 0) damaged(label, "cannot open");
  return read_open_file(label, file.id);
}

std::string write_h5_tree(const H5Tree& tree) {
  std::lock_guard lock(h5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  check(H5Pset_fapl_core(fapl.id, 1 << 16, 0), "core driver");
  Handle file(H5Fcreate("trainkit-image.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id), H5Fclose);
  if (file.id < 0) check(-1, "create");
  auto open_group = [&](const std::string& path) -> hid_t {
    return path.empty() ? H5Gopen2(file.id, "/", H5P_DEFAULT) : H5Gopen2(file.id, path.c_str(), H5P_DEFAULT);
  };
  for (const std::string& g : tree.groups)  // std::set order: parents before children
    if (!g.empty()) {
      Handle h(H5Gcreate2(file.id, g.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      if (h.id < 0) check(-1, ("group " + g).c_str());
    }
  for (const auto& [path, t] : tree.datasets) {
    std::vector<hsize_t> dims;
    for (int i = 0; i < t.shape().rank(); ++i) dims.push_back(static_cast<hsize_t>(t.shape()[i]));
    Handle space(
        dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
        H5Sclose);
    const bool integer = t.dtype() == DType::i64 || t.dtype() == DType::i32;
    const hid_t file_type = integer ? (t.dtype() == DType::i64 ? H5T_STD_I64LE : H5T_STD_I32LE) : H5T_IEEE_F32LE;
    const hid_t mem_type = integer ? (t.dtype() == DType::i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32) : H5T_NATIVE_FLOAT;
    if (!integer && t.dtype() != DType::f32) throw InvalidArgument("write_h5_tree: '" + path + "' is not float32");
    Handle d(H5Dcreate2(file.id, path.c_str(), file_type, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    if (d.id < 0) check(-1, ("dataset " + path).c_str());
    if (t.numel() > 0) check(H5Dwrite(d.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()), path.c_str());
  }
  for (const auto& [object, named] : tree.attrs) {
    Handle obj(tree.datasets.count(object) ? H5Dopen2(file.id, object.c_str(), H5P_DEFAULT) : open_group(object),
               tree.datasets.count(object) ? H5Dclose : H5Gclose);
    if (obj.id < 0) check(-1, ("attributes of " + object).c_str());
    for (const auto& [name, values] : named) {
      Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      check(H5Tset_size(type.id, H5T_VARIABLE), "string type");
      check(H5Tset_cset(type.id, H5T_CSET_UTF8), "string type");
      const hsize_t n = values.size();
      Handle space(values.size() == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
      Handle a(H5Acreate2(obj.id, name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      if (a.id < 0) check(-1, ("attribute " + name).c_str());
      std::vector<const char*> ptrs;
      for (const std::string& v : values) ptrs.push_back(v.c_str());
      check(H5Awrite(a.id, type.id, ptrs.data()), ("attribute " + name).c_str());
    }
  }
  check(H5Fflush(file.id, H5F_SCOPE_GLOBAL), "flush");
  const ssize_t size = H5Fget_file_image(file.id, nullptr, 0);
  if (size < 0) check(-1, "file image size");
  std::string out(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file.id, out.data(), out.size()) < 0) check(-1, "file image");
  return out;
}

}  // namespace tk::io
