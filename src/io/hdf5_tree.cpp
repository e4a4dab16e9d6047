// Reads HDF5 trees through the HDF5 C library, and the helper's answer (see hdf5_tree.h).
#include "io/hdf5_tree.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "core/device_bytes.h"
#include "data/hdf5_isolation.h"
#include "io/fd_write.h"
#include "io/file_staging.h"
#include "io/hdf5_blocks.h"
#include "io/hdf5_handle.h"
#include "io/temp_file.h"
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
  for (const auto& [p, d] : stored) take(p);
  return {out.begin(), out.end()};
}

H5DataFile::~H5DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<H5DatasetInfo> H5Tree::info(const std::string& path) const {
  if (const Tensor* t = dataset(path)) return H5DatasetInfo{t->shape(), t->dtype()};
  auto it = stored.find(path);
  if (it == stored.end()) return std::nullopt;
  return it->second.info;
}

void H5Tree::read_into(const std::string& path, Tensor& dst, const std::string& label) const {
  const std::optional<H5DatasetInfo> have = info(path);
  if (!have) throw FormatError(label + ": dataset '/" + path + "' is missing");
  if (have->shape != dst.shape() || have->dtype != dst.dtype())
    throw FormatError(label + ": dataset '/" + path + "' is " + have->shape.to_string() + " " +
                      std::string(dtype_name(have->dtype)) + ", its destination " + dst.shape().to_string() + " " +
                      std::string(dtype_name(dst.dtype())));
  if (const Tensor* t = dataset(path)) {
    device_copy(dst.raw(), dst.device(), t->raw(), t->device(), t->nbytes());
    return;
  }
  if (!data_file) throw FormatError(label + ": dataset '/" + path + "' has no data file");
  read_file_into(data_file->fd(), stored.at(path).offset, dst, label, path);
}

Tensor H5Tree::load(const std::string& path, const std::string& label) const {
  if (const Tensor* t = dataset(path)) return *t;
  const std::optional<H5DatasetInfo> have = info(path);
  if (!have) throw FormatError(label + ": dataset '/" + path + "' is missing");
  Tensor t(have->shape, have->dtype, Device::cpu(),
           label + ": read of " + path);  // the owner tag names file and tensor
  read_into(path, t, label);
  return t;
}

void H5Tree::materialize(const std::string& label) {
  for (const auto& [path, d] : stored) datasets[path] = load(path, label);
  stored.clear();
  data_file.reset();
}

std::mutex& hdf5_library_mutex() {
  static std::mutex mu;
  return mu;
}

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

constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 30;
constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};  // an HDF5 file's first bytes

using Handle = Hdf5Handle;

[[noreturn]] void damaged(const std::string& label, const std::string& what) {
  throw FormatError(label + ": " + what + ": " + hdf5_innermost_error() +
                    " (the file is damaged or was not written completely; save it again)");
}

class Reader {
 public:
  // data_fd >= 0: each dataset is read through one staging buffer and appended there (H5Tree::stored).
  Reader(std::string label, H5Tree& out, int data_fd = -1) : label_(std::move(label)), out_(out), data_fd_(data_fd) {}

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
    const size_t element = dt == DType::f32 ? 4 : 8;
    total_ += numel * element;
    if (numel > kMaxTotalBytes || total_ > kMaxTotalBytes)
      throw FormatError(label_ + ": dataset '/" + path + "' would take the file's weights past 1 GiB (damaged?)");
    const hid_t mem_type = dt == DType::f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64;
    if (data_fd_ < 0) {
      Tensor t(Shape(shape), dt, Device::cpu(), label_ + ": read of " + path);  // the owner tag names file and tensor
      if (numel > 0 && H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()) < 0)
        damaged(label_, "cannot read dataset '/" + path + "'");
      out_.datasets[path] = std::move(t);
      return;
    }
    // Streaming: blocks of at most one staging buffer, read by hyperslab and appended to the data file.
    out_.stored[path] = {{Shape(shape), dt}, data_size_};
    const size_t capacity = std::max(element, std::min<size_t>(numel * element, file_staging_capacity()));
    std::vector<hsize_t> hdims(dims, dims + rank);
    Tensor staging;  // (capacity) u8, made when the dataset has elements
    for_each_block(hdims, element, capacity, [&](const hsize_t* start, const hsize_t* count, size_t, size_t n) {
      if (!staging.defined())
        staging = Tensor(Shape{static_cast<int64_t>(capacity)}, DType::u8, Device::cpu(),
                         file_owner(label_, "staging for", path));
      const hsize_t hn = n;
      Handle mem(H5Screate_simple(1, &hn, nullptr), H5Sclose);
      if (rank > 0 && H5Sselect_hyperslab(space.id, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0)
        damaged(label_, "cannot select part of dataset '/" + path + "'");
      if (H5Dread(d, mem_type, rank > 0 ? mem.id : H5S_ALL, rank > 0 ? space.id : H5S_ALL, H5P_DEFAULT, staging.raw()) <
          0)
        damaged(label_, "cannot read dataset '/" + path + "'");
      append(staging.raw(), n * element);
    });
  }

  void append(const void* data, size_t n) {
    if (write_fully(data_fd_, data, n) < n)
      throw IoError(label_ + ": cannot write trainkit's temporary data file: " + std::strerror(errno) +
                    " (loading needs free disk space for the file's weights in the temporary directory, TMPDIR)");
    data_size_ += n;
  }

  std::string label_;
  H5Tree& out_;
  int depth_ = 0;
  int objects_ = 0;
  uint64_t total_ = 0;
  int data_fd_ = -1;
  uint64_t data_size_ = 0;
};

H5Tree read_open_file(const std::string& label, hid_t file, int data_fd) {
  H5Tree t;
  Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose);
  if (root.id < 0) damaged(label, "cannot open the root group");
  Reader(label, t, data_fd).group(root.id, "");
  return t;
}

}  // namespace

H5Tree read_h5_tree_file_in_process(const std::string& path, const std::string& label, const std::string& data_path) {
  const runtime::FileOperation op("loading " + label);  // an OOM here (the helper has the budget too) is about the file
  std::lock_guard lock(hdf5_library_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(label + ": cannot open: " + std::strerror(errno) + " (check the path)");
  char sig[8] = {};
  const size_t got = std::fread(sig, 1, 8, f);
  std::fclose(f);
  if (got < 8 || std::memcmp(sig, kSignature, 8) != 0)
    throw FormatError(label + ": not an HDF5 file (no HDF5 signature at byte 0; expected Keras weights)");
  int data_fd = -1;
  if (!data_path.empty()) {
    data_fd = ::open(data_path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (data_fd < 0) throw IoError(label + ": cannot open the data file " + data_path + ": " + std::strerror(errno));
  }
  CloseFd close_data{data_fd};
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file.id < 0) damaged(label, "cannot open");
  return read_open_file(label, file.id, data_fd);
}

H5Tree open_h5_tree_file(const std::string& path, const std::string& label) {
  if (data::hdf5_isolation::in_process()) return read_h5_tree_file_in_process(path, label);
  // The helper appends each dataset to this file; it is unlinked once the answer is in, and read from its open
  // descriptor (H5DataFile) until the tree goes.
  TempFile data("tk-h5-data", label);
  H5Tree t = parse_h5_tree(data::hdf5_isolation::fetch_tree(path, label, data.path()), label);
  const off_t size = ::lseek(data.fd(), 0, SEEK_END);
  for (const auto& [p, d] : t.stored)
    if (size < 0 || d.offset > static_cast<uint64_t>(size) ||
        d.info.shape.numel() * static_cast<int64_t>(dtype_size(d.info.dtype)) >
            static_cast<int64_t>(static_cast<uint64_t>(size) - d.offset))
      throw FormatError(label + ": the HDF5 helper's answer places dataset '/" + p + "' past the end of its data file");
  t.data_file = std::make_shared<const H5DataFile>(data.release_fd(), static_cast<uint64_t>(size < 0 ? 0 : size));
  return t;
}

H5Tree read_h5_tree_file(const std::string& path) {
  H5Tree t = open_h5_tree_file(path, path);
  t.materialize(path);
  return t;
}

H5Tree read_h5_tree_image(const std::string& label, const void* data, size_t size) {
  if (size < 8 || std::memcmp(data, kSignature, 8) != 0)
    throw FormatError(label + ": not an HDF5 file (no HDF5 signature at byte 0)");
  // The helper reads files: the image goes to a private temporary first.
  TempFile tmp("tk-h5", label);
  tmp.write_all(data, size);
  H5Tree t = open_h5_tree_file(tmp.path(), label);
  t.materialize(label);
  return t;
}

namespace {

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

class In {
 public:
  In(const std::string& b, const std::string& label, size_t start) : b_(b), label_(label), pos_(start) {}
  uint64_t u64() {
    uint64_t v;
    raw(&v, 8);
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
  size_t pos_;
};

constexpr const char* kTreeMagic = "TKH5TREE1";

}  // namespace

std::string serialize_h5_tree(const H5Tree& t) {
  std::string out = kTreeMagic;
  put_u64(out, t.groups.size());
  for (const std::string& g : t.groups) put_str(out, g);
  // Per dataset: path, kind (0 f32 / 1 i64 with its bytes here; 2 f32 / 3 i64 stored in the data file), shape,
  // byte count, then the bytes (held) or the offset in the data file (stored).
  put_u64(out, t.datasets.size() + t.stored.size());
  auto head = [&](const std::string& path, const H5DatasetInfo& info, bool stored, uint64_t nbytes) {
    put_str(out, path);
    put_u64(out, (info.dtype == DType::i64 ? 1 : 0) + (stored ? 2 : 0));
    put_u64(out, static_cast<uint64_t>(info.shape.rank()));
    for (int i = 0; i < info.shape.rank(); ++i) put_u64(out, static_cast<uint64_t>(info.shape[i]));
    put_u64(out, nbytes);
  };
  for (const auto& [path, v] : t.datasets) {
    head(path, {v.shape(), v.dtype()}, false, v.nbytes());
    out.append(static_cast<const char*>(v.raw()), v.nbytes());
  }
  for (const auto& [path, d] : t.stored) {
    head(path, d.info, true, static_cast<uint64_t>(d.info.shape.numel()) * dtype_size(d.info.dtype));
    put_u64(out, d.offset);
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
  In in(bytes, label, m);
  H5Tree t;
  for (uint64_t n = in.count(8); n > 0; --n) t.groups.insert(in.str());
  for (uint64_t n = in.count(32); n > 0; --n) {
    std::string path = in.str();
    const uint64_t kind = in.u64();
    const uint64_t rank = in.u64();
    if (kind > 3 || rank > 8) in.bad("a dataset kind or rank out of range");
    const bool integer = kind % 2 == 1, stored = kind >= 2;
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (uint64_t i = 0; i < rank; ++i) {
      const uint64_t d = in.u64();
      if (d > (uint64_t{1} << 40) || (d > 0 && numel > (uint64_t{1} << 40) / d)) in.bad("a dimension out of range");
      numel *= d;
      dims.push_back(static_cast<int64_t>(d));
    }
    const DType dt = integer ? DType::i64 : DType::f32;
    const uint64_t nbytes = in.u64();
    if (nbytes != numel * (integer ? 8 : 4)) in.bad("a dataset's byte count does not match its shape");
    if (t.datasets.count(path) || t.stored.count(path)) in.bad("a dataset named twice");
    if (stored) {  // its bytes are in the data file: the caller checks the offset against the file's size
      const uint64_t offset = in.u64();
      if (offset > (uint64_t{1} << 40) || nbytes > (uint64_t{1} << 40)) in.bad("a data file offset out of range");
      t.stored[path] = {{Shape(dims), dt}, offset};
      continue;
    }
    if (nbytes > bytes.size()) in.bad("a dataset larger than the answer");
    Tensor v(Shape(dims), dt, Device::cpu(), label + ": read of " + path);  // the owner tag names file and tensor
    in.raw(v.raw(), nbytes);
    t.datasets[path] = std::move(v);
  }
  for (uint64_t n = in.count(16); n > 0; --n) {
    auto& named = t.attrs[in.str()];
    for (uint64_t k = in.count(16); k > 0; --k) {
      auto& values = named[in.str()];
      for (uint64_t j = in.count(8); j > 0; --j) values.push_back(in.str());
    }
  }
  if (!in.done()) in.bad("bytes after the end");
  return t;
}

}  // namespace tk::io
