// Reads and writes whole HDF5 trees through the HDF5 C library (see hdf5_tree.h).
#include "io/hdf5_tree.h"

#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "data/hdf5_isolation.h"
#include "io/hdf5_handle.h"
#include "runtime/device_memory.h"
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

std::mutex& hdf5_library_mutex() {
  static std::mutex mu;
  return mu;
}

namespace {

constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 30;

using Handle = Hdf5Handle;

}  // namespace

std::string hdf5_innermost_error() {
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

namespace {

[[noreturn]] void damaged(const std::string& label, const std::string& what) {
  throw FormatError(label + ": " + what + ": " + hdf5_innermost_error() +
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
    Tensor t(Shape(shape), dt, Device::cpu(), label_ + ": read of " + path);  // the owner tag names file and tensor
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

}  // namespace

H5Tree read_h5_tree_file_in_process(const std::string& path, const std::string& label) {
  const runtime::FileOperation op("loading " + label);  // an OOM here (the helper has the budget too) is about the file
  std::lock_guard lock(hdf5_library_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char sig[8] = {};
    const size_t got = std::fread(sig, 1, 8, f);
    std::fclose(f);
    static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
    if (got < 8 || std::memcmp(sig, kSignature, 8) != 0)
      throw FormatError(label + ": not an HDF5 file (no HDF5 signature at byte 0; expected Keras weights)");
  } else {
    throw IoError(label + ": cannot open: " + std::strerror(errno) + " (check the path)");
  }
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) damaged(label, "cannot open");
  return read_open_file(label, file.id);
}

H5Tree read_h5_tree_file(const std::string& path) {
  if (data::hdf5_isolation::in_process()) return read_h5_tree_file_in_process(path, path);
  return parse_h5_tree(data::hdf5_isolation::fetch_tree(path, path), path);
}

H5Tree read_h5_tree_image(const std::string& label, const void* data, size_t size) {
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  if (size < 8 || std::memcmp(data, kSignature, 8) != 0)
    throw FormatError(label + ": not an HDF5 file (no HDF5 signature at byte 0)");
  // The helper reads files: the image goes to a private temporary first.
  std::string tmp = (std::filesystem::temp_directory_path() / "tk-h5-XXXXXX").string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw IoError(label + ": cannot create a temporary file: " + std::strerror(errno));
  struct Remove {
    std::string p;
    ~Remove() { std::remove(p.c_str()); }
  } remove{tmp};
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, p + done, size - done);
    if (n <= 0) {
      ::close(fd);
      throw IoError(label + ": cannot write a temporary file " + tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (data::hdf5_isolation::in_process()) return read_h5_tree_file_in_process(tmp, label);
  return parse_h5_tree(data::hdf5_isolation::fetch_tree(tmp, label), label);
}

namespace {

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

class In {
 public:
  In(const std::string& b, const std::string& label) : b_(b), label_(label) {}
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, b_.data() + pos_, 8);
    pos_ += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items that take at least `min_bytes` each: no more than the bytes left allow.
  uint64_t count(uint64_t min_bytes) {
    const uint64_t n = u64();
    if (n > (b_.size() - pos_) / min_bytes) bad("a count larger than the data");
    return n;
  }
  void raw(void* dst, uint64_t n) {
    need(n);
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == b_.size(); }
  [[noreturn]] void bad(const std::string& what) const {
    throw FormatError(label_ + ": the HDF5 helper's answer is malformed at byte " + std::to_string(pos_) + " (" + what +
                      ")");
  }

 private:
  void need(uint64_t n) const {
    if (n > b_.size() - pos_) bad("it ends early");
  }
  const std::string& b_;
  const std::string& label_;
  size_t pos_ = 0;
};

constexpr const char* kTreeMagic = "TKH5TREE1";

}  // namespace

std::string serialize_h5_tree(const H5Tree& t) {
  std::string out = kTreeMagic;
  put_u64(out, t.groups.size());
  for (const std::string& g : t.groups) put_str(out, g);
  put_u64(out, t.datasets.size());
  for (const auto& [path, v] : t.datasets) {
    put_str(out, path);
    put_u64(out, v.dtype() == DType::i64 ? 1 : 0);
    put_u64(out, static_cast<uint64_t>(v.shape().rank()));
    for (int i = 0; i < v.shape().rank(); ++i) put_u64(out, static_cast<uint64_t>(v.shape()[i]));
    put_u64(out, v.nbytes());
    out.append(static_cast<const char*>(v.raw()), v.nbytes());
  }
  put_u64(out, t.attrs.size());
  for (const auto& [object, named] : t.attrs) {
    put_str(out, object);
    put_u64(out, named.size());
    for (const auto& [name, values] : named) {
      put_str(out, name);
      put_u64(out, values.size());
      for (const std::string& v : values) put_str(out, v);
    }
  }
  return out;
}

H5Tree parse_h5_tree(const std::string& bytes, const std::string& label) {
  const size_t m = std::strlen(kTreeMagic);
  if (bytes.compare(0, m, kTreeMagic) != 0)
    throw FormatError(label + ": the HDF5 helper's answer does not start with " + kTreeMagic);
  const std::string body = bytes.substr(m);
  In in(body, label);
  H5Tree t;
  for (uint64_t n = in.count(8); n > 0; --n) t.groups.insert(in.str());
  for (uint64_t n = in.count(32); n > 0; --n) {
    std::string path = in.str();
    const uint64_t kind = in.u64();
    const uint64_t rank = in.u64();
    if (kind > 1 || rank > 8) in.bad("a dataset kind or rank out of range");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (uint64_t i = 0; i < rank; ++i) {
      const uint64_t d = in.u64();
      if (d > (uint64_t{1} << 40) || (d > 0 && numel > (uint64_t{1} << 40) / d)) in.bad("a dimension out of range");
      numel *= d;
      dims.push_back(static_cast<int64_t>(d));
    }
    const DType dt = kind == 1 ? DType::i64 : DType::f32;
    const uint64_t nbytes = in.u64();
    if (nbytes != numel * (kind == 1 ? 8 : 4)) in.bad("a dataset's byte count does not match its shape");
    if (nbytes > bytes.size()) in.bad("a dataset larger than the answer");
    Tensor v(Shape(dims), dt, Device::cpu(), label + ": read of " + path);  // the owner tag names file and tensor
    in.raw(v.raw(), nbytes);
    t.datasets[path] = std::move(v);
  }
  for (uint64_t n = in.count(16); n > 0; --n) {
    std::string object = in.str();
    auto& named = t.attrs[object];
    for (uint64_t k = in.count(16); k > 0; --k) {
      std::string name = in.str();
      auto& values = named[name];
      for (uint64_t j = in.count(8); j > 0; --j) values.push_back(in.str());
    }
  }
  if (!in.done()) in.bad("bytes after the end");
  return t;
}

}  // namespace tk::io
