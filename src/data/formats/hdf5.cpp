#include "trainkit/data/hdf5.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>

#include "data/formats/bytes.h"
#include "data/hdf5_isolation.h"

namespace tk::data {
namespace {

// load_hdf5 / read_hdf5_rows refuse results over this before allocating (the same limit as load_idx).
constexpr uint64_t kMaxLoadBytes = uint64_t{4} << 30;
// The streaming reader's block size when the caller leaves it to us.
constexpr uint64_t kTargetBlockBytes = uint64_t{1} << 20;
// Whole-chunk blocks are used only while one chunk's rows stay under this; beyond, ~1 MiB blocks.
constexpr uint64_t kMaxAlignedBlockBytes = uint64_t{64} << 20;
// HDF5's per-dataset chunk cache for streaming: one chunk, at least 1 MiB, at most 8 MiB.
constexpr uint64_t kMinChunkCache = uint64_t{1} << 20;
constexpr uint64_t kMaxChunkCache = uint64_t{8} << 20;
constexpr size_t kChunkCacheSlots = 521;  // a prime, as HDF5's documentation advises
// Dataset paths listed in a "no such dataset" message before "... and N more".
constexpr size_t kMaxListed = 20;

// ---- one lock for the whole library ----

// Debian's "serial" libhdf5 may or may not be built thread-safe; either way every HDF5 call goes through
// this lock, so readers on several threads are safe. Recursive: handle destructors take it too and run
// inside locked regions.
std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

class Lock {
 public:
  Lock() : lock_(h5_mutex()) {
    // Errors become exceptions, so HDF5 must not print its stack to stderr. The setting belongs to the
    // calling thread's error stack in a thread-safe build, hence once per thread.
    thread_local bool silenced = false;
    if (!silenced) {
      H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      silenced = true;
    }
  }

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// ---- RAII for hid_t ----

template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() noexcept {
    if (id_ < 0) return;
    std::lock_guard lock(h5_mutex());
    Close(id_);  // a failure to close cannot be reported from a destructor; the stack is cleared by the next call
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using FileHandle = Handle<H5Fclose>;
using DatasetHandle = Handle<H5Dclose>;
using SpaceHandle = Handle<H5Sclose>;
using TypeHandle = Handle<H5Tclose>;
using PlistHandle = Handle<H5Pclose>;

// ---- errors ----

std::string prefix(const std::string& file) { return "HDF5 file '" + file + "': "; }

std::string dataset_label(const std::string& dataset) { return "dataset '" + dataset + "'"; }

struct H5Problem {
  std::string text;   // "<description> [HDF5: <major>; <minor>]"
  bool io = false;    // a read error reported by the operating system
  bool lock = false;  // the file is locked by another process
};

std::string h5_message(hid_t id) {
  char buf[256] = {};
  H5E_type_t type;
  return H5Eget_msg(id, &type, buf, sizeof buf) > 0 ? std::string(buf) : std::string("?");
}

// Reads the calling thread's HDF5 error stack, innermost entry first, and clears it. Call right after the
// failing HDF5 call: any other API call would reset the stack.
H5Problem take_error_stack() {
  struct Entry {
    hid_t maj, min;
    std::string desc;
  };
  std::vector<Entry> entries;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        try {
          static_cast<std::vector<Entry>*>(data)->push_back({e->maj_num, e->min_num, e->desc ? e->desc : ""});
        } catch (...) {
          return -1;
        }
        return 0;
      },
      &entries);
  H5Eclear2(H5E_DEFAULT);
  H5Problem p;
  if (entries.empty()) {
    p.text = "HDF5 reported a failure without details";
    return p;
  }
  const Entry* inner = &entries.front();  // walking upward: the innermost (most specific) entry comes first
  for (const Entry& e : entries)
    if (!e.desc.empty()) {
      inner = &e;
      break;
    }
  p.text = "\"" + inner->desc + "\" [HDF5: " + h5_message(inner->maj) + "; " + h5_message(inner->min) + "]";
  for (char& c : p.text)
    if (c == '\n' || c == '\r') c = ' ';
  p.io = inner->maj == H5E_IO && inner->desc.find("errno = ") != std::string::npos;
  for (const Entry& e : entries)
    if (e.min == H5E_CANTLOCKFILE) p.lock = true;
  return p;
}

// Throws for the failure HDF5 just reported: IoError when the operating system failed a read, FormatError
// (the contents are damaged) otherwise.
[[noreturn]] void fail(const std::string& file, const std::string& action) {
  H5Problem p = take_error_stack();
  if (p.lock)
    throw IoError(prefix(file) + action + ": the file is locked: " + p.text +
                  " (another process has it open for writing; close it, or set HDF5_USE_FILE_LOCKING=FALSE)");
  if (p.io) throw IoError(prefix(file) + action + ": " + p.text + " (check the file and the disk)");
  throw FormatError(prefix(file) + action + ": " + p.text +
                    " (the file is damaged or was not written completely; re-create or re-download it)");
}

hid_t check_id(hid_t id, const std::string& file, const std::string& action) {
  if (id < 0) fail(file, action);
  return id;
}

void check(herr_t status, const std::string& file, const std::string& action) {
  if (status < 0) fail(file, action);
}

// ---- cheap checks before libhdf5 sees the file ----

constexpr uint8_t kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1A, '\n'};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads up to n bytes at offset; fewer only at the end of the file.
size_t pread_full(const Fd& fd, uint8_t* dst, size_t n, uint64_t offset, const std::string& file) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd.get(), dst + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw IoError(prefix(file) + "read failed at byte offset " + std::to_string(offset + got) + ": " +
                    std::strerror(errno) + " (check the file and the disk)");
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

// Opens the file ourselves first: a clear IoError for a missing file, and a FormatError with a byte offset
// for a file that is not HDF5 or is truncated, before libhdf5's less precise messages (or its less
// hardened code paths). Returns the file's size in bytes.
uint64_t precheck(const std::string& file) {
  int raw = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0)
    throw IoError(prefix(file) + "cannot open: " + std::strerror(errno) + " (check the path and its permissions)");
  Fd fd(raw);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw IoError(prefix(file) + "cannot stat: " + std::strerror(errno) + " (check the path and its permissions)");
  if (S_ISDIR(st.st_mode)) throw IoError(prefix(file) + "is a directory, not a file (pass the path of an HDF5 file)");
  if (!S_ISREG(st.st_mode))
    throw IoError(prefix(file) + "is not a regular file (HDF5 needs a seekable file; copy the data to a file first)");
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0)
    throw FormatError(prefix(file) +
                      "not an HDF5 file: the file is empty (0 bytes) (check the path, or re-create the file)");

  // The superblock starts with the signature at byte 0, or after a user block at 512, 1024, 2048, ...
  uint64_t sig = std::numeric_limits<uint64_t>::max();
  uint8_t first[8] = {};
  const size_t first_got = pread_full(fd, first, sizeof first, 0, file);
  for (uint64_t off = 0; off + sizeof kSignature <= size; off = off ? off * 2 : 512) {
    uint8_t b[8];
    if (pread_full(fd, b, sizeof b, off, file) == sizeof b && std::memcmp(b, kSignature, sizeof b) == 0) {
      sig = off;
      break;
    }
  }
  if (sig == std::numeric_limits<uint64_t>::max())
    throw FormatError(prefix(file) + "not an HDF5 file: no HDF5 signature (89 48 44 46 0d 0a 1a 0a) at byte offset 0 " +
                      "(found " + hex_bytes(first, first_got) + ") nor at 512, 1024, 2048, ... in its " +
                      std::to_string(size) + " bytes (check the path; the file may be in another format)");

  uint8_t sb[128] = {};
  const size_t got = pread_full(fd, sb, sizeof sb, sig, file);
  const std::string at = "the superblock at byte offset " + std::to_string(sig);
  const std::string redo = "the file was not written or copied completely; re-create or re-download it";
  if (got < 9)
    throw FormatError(prefix(file) + "truncated: the file ends at byte " + std::to_string(size) + ", inside " + at +
                      " (" + redo + ")");
  const int version = sb[8];
  size_t offsets = 0, lengths = 0, base_at = 0, need = 0;
  if (version == 0 || version == 1) {
    offsets = sb[13];
    lengths = sb[14];
    base_at = version == 0 ? 24 : 28;
    need = base_at + 4 * offsets;  // base, free space, end of file and driver addresses
  } else if (version == 2 || version == 3) {
    offsets = sb[9];
    lengths = sb[10];
    base_at = 12;
    need = base_at + 4 * offsets + 4;  // base, extension, end of file, root addresses and a checksum
  } else {
    return size;  // a version this check does not know: libhdf5 judges it
  }
  auto valid_size = [](size_t n) { return n == 2 || n == 4 || n == 8; };
  if (!valid_size(offsets) || !valid_size(lengths))
    throw FormatError(prefix(file) + at + " (version " + std::to_string(version) + ") declares " +
                      std::to_string(offsets) + "-byte addresses and " + std::to_string(lengths) +
                      "-byte lengths at byte offset " + std::to_string(sig + (version < 2 ? 13 : 9)) +
                      "; HDF5 uses 2, 4 or 8 (the file is damaged; re-create or re-download it)");
  if (got < need)
    throw FormatError(prefix(file) + "truncated: the file ends at byte " + std::to_string(size) + ", inside " + at +
                      ", which needs " + std::to_string(need) + " bytes (" + redo + ")");
  const uint64_t undefined = offsets == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * offsets)) - 1;
  const size_t eof_at = base_at + 2 * offsets;
  const uint64_t eof = load_le_uint(sb + eof_at, offsets);
  // libhdf5 compares the stored end-of-file address with the file's size in the same way.
  if (eof != undefined && eof > size)
    throw FormatError(prefix(file) + "truncated: " + at + " records (at byte offset " + std::to_string(sig + eof_at) +
                      ") that the file ends at byte " + std::to_string(eof) + ", but it has only " +
                      std::to_string(size) + " bytes (" + redo + ")");
  return size;
}

// ---- element types ----

struct ElementType {
  bool supported = false;
  DType dtype = DType::f32;
  std::string name;             // "float64", "int16", "bool", "fixed-length string (3 bytes)", ...
  hid_t mem = H5I_INVALID_HID;  // the memory type H5Dread converts to
  TypeHandle owned;             // owns `mem` unless it is one of the library's native types
  bool is_bool = false;         // read as the enum's 1-byte values, then mapped to 0 / 1
  uint8_t false_value = 0, true_value = 1;
};

// IEEE half and bfloat16 as little-endian HDF5 float types (the layout h5py writes for float16).
TypeHandle two_byte_float(bool bfloat, const std::string& file) {
  TypeHandle t(check_id(H5Tcopy(H5T_IEEE_F32LE), file, "cannot create a float16 type"));
  const size_t esize = bfloat ? 8 : 5, msize = bfloat ? 7 : 10;
  check(H5Tset_fields(t.get(), 15, msize, esize, 0, msize), file, "cannot create a float16 type");
  check(H5Tset_precision(t.get(), 16), file, "cannot create a float16 type");
  check(H5Tset_offset(t.get(), 0), file, "cannot create a float16 type");
  check(H5Tset_size(t.get(), 2), file, "cannot create a float16 type");
  check(H5Tset_ebias(t.get(), bfloat ? 127 : 15), file, "cannot create a float16 type");
  return t;
}

// libhdf5 1.10 trusts the bit layout a file declares for integer and float types, and its conversion code
// then reads and writes outside the element (newer HDF5 rejects such types when decoding them). The same
// check here, before any data is converted: every field must lie inside the element's bits.
void check_bit_layout(hid_t type, H5T_class_t cls, size_t size, const std::string& file, const std::string& dataset,
                      const std::string& action) {
  const size_t bits = 8 * size;
  const int offset = H5Tget_offset(type);
  const size_t precision = H5Tget_precision(type);
  if (offset < 0 || precision == 0) fail(file, action);
  std::string bad;
  if (static_cast<size_t>(offset) + precision > bits)
    bad = "bit offset " + std::to_string(offset) + " + precision " + std::to_string(precision);
  if (bad.empty() && cls == H5T_FLOAT) {
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    check(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize), file, action);
    if (spos >= bits || esize == 0 || msize == 0 || epos + esize > bits || mpos + msize > bits)
      bad = "sign bit " + std::to_string(spos) + ", exponent bits [" + std::to_string(epos) + ", " +
            std::to_string(epos + esize) + "), mantissa bits [" + std::to_string(mpos) + ", " +
            std::to_string(mpos + msize) + ")";
  }
  if (!bad.empty())
    throw FormatError(prefix(file) + "the element type of " + dataset_label(dataset) + " is damaged: a " +
                      std::to_string(size) + "-byte " + (cls == H5T_FLOAT ? "float" : "integer") + " declares " + bad +
                      ", outside its " + std::to_string(bits) + " bits (re-create or re-download the file)");
}

ElementType classify(hid_t type, const std::string& file, const std::string& dataset) {
  const std::string action = "cannot read the element type of " + dataset_label(dataset);
  ElementType e;
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_NO_CLASS) fail(file, action);
  const size_t size = H5Tget_size(type);
  if (size == 0) fail(file, action);
  const bool big_endian = (cls == H5T_INTEGER || cls == H5T_FLOAT) && H5Tget_order(type) == H5T_ORDER_BE;
  const std::string bits = std::to_string(8 * size);
  switch (cls) {
    case H5T_INTEGER: {
      check_bit_layout(type, cls, size, file, dataset, action);
      const H5T_sign_t sign = H5Tget_sign(type);
      if (sign == H5T_SGN_ERROR) fail(file, action);
      const bool is_signed = sign == H5T_SGN_2;
      e.name = (is_signed ? "int" : "uint") + bits;
      e.supported = true;
      if (is_signed && (size == 1 || size == 2 || size == 4)) {
        e.dtype = DType::i32, e.mem = H5T_NATIVE_INT32;
      } else if (is_signed && size == 8) {
        e.dtype = DType::i64, e.mem = H5T_NATIVE_INT64;
      } else if (!is_signed && size == 1) {
        e.dtype = DType::u8, e.mem = H5T_NATIVE_UINT8;
      } else if (!is_signed && size == 2) {
        e.dtype = DType::i32, e.mem = H5T_NATIVE_INT32;
      } else if (!is_signed && size == 4) {
        e.dtype = DType::i64, e.mem = H5T_NATIVE_INT64;
      } else {
        e.supported = false;
        if (!is_signed && size == 8) e.name += " (values above 2^63 - 1 would not fit int64)";
      }
      break;
    }
    case H5T_FLOAT: {
      check_bit_layout(type, cls, size, file, dataset, action);
      e.name = "float" + bits;
      e.supported = size == 2 || size == 4 || size == 8;
      e.dtype = DType::f32, e.mem = H5T_NATIVE_FLOAT;
      if (size == 2) {
        size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
        check(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize), file, action);
        const size_t ebias = H5Tget_ebias(type);
        const bool half = spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && ebias == 15;
        const bool bfloat = spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && ebias == 127;
        if (half || bfloat) {
          e.owned = two_byte_float(bfloat, file);
          e.mem = e.owned.get();
          e.dtype = bfloat ? DType::bf16 : DType::f16;
          e.name = bfloat ? "bfloat16" : "float16";
        } else {  // not IEEE half: HDF5 converts it to float32, and the listing says what it is
          e.name = "16-bit float (" + std::to_string(esize) + " exponent bits, " + std::to_string(msize) +
                   " mantissa bits, bias " + std::to_string(ebias) + ")";
        }
      }
      break;
    }
    case H5T_ENUM: {
      TypeHandle base(check_id(H5Tget_super(type), file, action));
      const int members = H5Tget_nmembers(type);
      if (members < 0) fail(file, action);
      e.name = "enum of " + std::to_string(members) + " members";
      if (members != 2 || H5Tget_size(base.get()) != 1 || H5Tget_class(base.get()) != H5T_INTEGER) break;
      check_bit_layout(base.get(), H5T_INTEGER, 1, file, dataset, action);
      bool has_false = false, has_true = false;
      for (unsigned i = 0; i < 2; ++i) {
        char* raw = H5Tget_member_name(type, i);
        if (!raw) fail(file, action);
        const std::string member = raw;
        H5free_memory(raw);
        uint8_t value = 0;
        check(H5Tget_member_value(type, i, &value), file, action);
        if (member == "FALSE") has_false = true, e.false_value = value;
        if (member == "TRUE") has_true = true, e.true_value = value;
      }
      if (!has_false || !has_true || e.false_value == e.true_value) break;
      // h5py's numpy.bool: enum {FALSE = 0, TRUE = 1} of int8. Read the raw byte values, map them after.
      e.owned = TypeHandle(check_id(H5Tget_native_type(type, H5T_DIR_ASCEND), file, action));
      e.mem = e.owned.get();
      e.supported = true, e.is_bool = true, e.dtype = DType::boolean, e.name = "bool";
      break;
    }
    case H5T_STRING: {
      const htri_t variable = H5Tis_variable_str(type);
      if (variable < 0) fail(file, action);
      e.name = variable ? "variable-length string" : "fixed-length string (" + std::to_string(size) + " bytes)";
      break;
    }
    case H5T_COMPOUND: {
      const int members = H5Tget_nmembers(type);
      e.name = "compound (" + std::to_string(std::max(members, 0)) + " members)";
      break;
    }
    case H5T_VLEN:
      e.name = "variable-length sequence";
      break;
    case H5T_ARRAY:
      e.name = "array";
      break;
    case H5T_OPAQUE:
      e.name = "opaque (" + std::to_string(size) + " bytes)";
      break;
    case H5T_REFERENCE:
      e.name = "reference";
      break;
    case H5T_BITFIELD:
      e.name = "bitfield (" + std::to_string(size) + " bytes)";
      break;
    case H5T_TIME:
      e.name = "time";
      break;
    default:
      e.name = "unknown type class " + std::to_string(static_cast<int>(cls));
      break;
  }
  if (big_endian) e.name += ", big-endian";
  return e;
}

// ---- datasets ----

struct DatasetMeta {
  Hdf5DatasetInfo info;
  ElementType type;
  std::vector<hsize_t> dims;
  uint64_t file_element_size = 0;
  bool null_space = false;
};

std::string dims_string(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

// Everything about an open dataset that reading it needs; throws only when HDF5 cannot describe it.
DatasetMeta describe(hid_t ds, const std::string& file, const std::string& dataset) {
  DatasetMeta m;
  m.info.path = dataset;
  const std::string action = "cannot read the description of " + dataset_label(dataset);
  TypeHandle type(check_id(H5Dget_type(ds), file, action));
  m.type = classify(type.get(), file, dataset);
  m.file_element_size = H5Tget_size(type.get());
  m.info.hdf5_type = m.type.name;
  m.info.dtype = m.type.dtype;
  m.info.supported = m.type.supported;

  SpaceHandle space(check_id(H5Dget_space(ds), file, action));
  const H5S_class_t cls = H5Sget_simple_extent_type(space.get());
  if (cls == H5S_NO_CLASS) fail(file, action);
  if (cls == H5S_NULL) {
    m.null_space = true;
    m.info.supported = false;
    m.info.hdf5_type += ", null dataspace (no data)";
  } else if (cls == H5S_SIMPLE) {
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) fail(file, action);
    m.dims.resize(static_cast<size_t>(rank));
    std::vector<hsize_t> max_dims(m.dims.size());
    if (rank > 0 && H5Sget_simple_extent_dims(space.get(), m.dims.data(), max_dims.data()) < 0) fail(file, action);
    std::vector<int64_t> shape;
    for (size_t i = 0; i < m.dims.size(); ++i) {
      const hsize_t d = m.dims[i];
      if (d > static_cast<hsize_t>(std::numeric_limits<int64_t>::max()))
        throw FormatError(prefix(file) + dataset_label(dataset) + " claims shape " + dims_string(m.dims) +
                          ", a dimension beyond 2^63 (the file is damaged; re-create or re-download it)");
      if (max_dims[i] != H5S_UNLIMITED && d > max_dims[i])
        throw FormatError(prefix(file) + dataset_label(dataset) + " claims shape " + dims_string(m.dims) +
                          " beyond its maximum shape " + dims_string(max_dims) +
                          " (the file is damaged; re-create or re-download it)");
      shape.push_back(static_cast<int64_t>(d));
    }
    m.info.shape = Shape(std::move(shape));
  }

  PlistHandle dcpl(check_id(H5Dget_create_plist(ds), file, action));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout < 0) fail(file, action);
  if (layout == H5D_CHUNKED && !m.dims.empty()) {
    std::vector<hsize_t> chunk(m.dims.size());
    const int n = H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (n < 0) fail(file, action);
    for (int i = 0; i < std::min(n, static_cast<int>(chunk.size())); ++i)
      m.info.chunk.push_back(static_cast<int64_t>(std::min<hsize_t>(chunk[static_cast<size_t>(i)], INT64_MAX)));
  }
  return m;
}

std::string join_paths(const std::vector<std::string>& paths) {
  if (paths.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < paths.size() && i < kMaxListed; ++i) s += (i ? ", " : "") + paths[i];
  if (paths.size() > kMaxListed) s += ", ... and " + std::to_string(paths.size() - kMaxListed) + " more";
  return s;
}

// "/train//x/" and "train/x" -> "/train/x"; components in order.
std::vector<std::string> split_path(const std::string& dataset) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < dataset.size()) {
    size_t j = dataset.find('/', i);
    if (j == std::string::npos) j = dataset.size();
    if (j > i) parts.push_back(dataset.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

// Dataset paths reachable through hard links, sorted. Caller holds the lock.
std::vector<std::string> dataset_paths(hid_t file_id, const std::string& file) {
  std::vector<std::string> links;
  const herr_t status = H5Lvisit(
      file_id, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        if (info->type != H5L_TYPE_HARD) return 0;
        try {
          static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
        } catch (...) {
          return -1;
        }
        return 0;
      },
      &links);
  if (status < 0) fail(file, "cannot list the file's groups and datasets");
  std::vector<std::string> datasets;
  for (const std::string& link : links) {
    H5O_info_t info{};
    if (H5Oget_info_by_name2(file_id, link.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
      fail(file, "cannot read the object header of '" + link + "'");
    if (info.type == H5O_TYPE_DATASET) datasets.push_back(link);
  }
  std::sort(datasets.begin(), datasets.end());
  return datasets;
}

// Opens a dataset by the caller's path, with InvalidArgument for paths that are not datasets. Caller holds
// the lock. `canonical` receives "/a/b".
DatasetHandle open_dataset(hid_t file_id, const std::string& file, const std::string& dataset, hid_t dapl,
                           std::string& canonical) {
  const std::vector<std::string> parts = split_path(dataset);
  auto not_found = [&](const std::string& what) {
    throw InvalidArgument(prefix(file) + what + " (datasets in the file: " + join_paths(dataset_paths(file_id, file)) +
                          ")");
  };
  if (parts.empty()) not_found("'" + dataset + "' is the root group, not a dataset");
  canonical.clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    canonical += "/" + parts[i];
    const htri_t exists = H5Lexists(file_id, canonical.c_str(), H5P_DEFAULT);
    if (exists < 0) fail(file, "cannot look up '" + canonical + "'");
    if (exists == 0)
      not_found("no " + dataset_label(dataset) +
                (i + 1 < parts.size() ? " (its group '" + canonical + "' does not exist)" : std::string()));
    H5L_info_t link{};
    if (H5Lget_info(file_id, canonical.c_str(), &link, H5P_DEFAULT) < 0)
      fail(file, "cannot look up '" + canonical + "'");
    if (link.type == H5L_TYPE_EXTERNAL)
      throw Unsupported(prefix(file) + "'" + canonical +
                        "' is an external link into another file, which trainkit does not follow (open the file it "
                        "points to instead)");
  }
  H5O_info_t info{};
  if (H5Oget_info_by_name2(file_id, canonical.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    fail(file, "cannot open '" + canonical + "'");
  if (info.type != H5O_TYPE_DATASET)
    not_found("'" + canonical + "' is " + (info.type == H5O_TYPE_GROUP ? "a group" : "a named datatype") +
              ", not a dataset");
  return DatasetHandle(
      check_id(H5Dopen2(file_id, canonical.c_str(), dapl), file, ("cannot open " + dataset_label(canonical))));
}

// Unsupported types, null dataspaces and unavailable compression filters fail here, before any read.
void require_readable(hid_t ds, const DatasetMeta& m, const std::string& file) {
  const std::string& dataset = m.info.path;
  if (!m.type.supported)
    throw Unsupported(prefix(file) + dataset_label(dataset) + " holds " + m.type.name +
                      " elements, which trainkit cannot load (it reads integer, float and bool datasets; store "
                      "numbers, e.g. encode strings as integer ids)");
  if (m.null_space)
    throw Unsupported(prefix(file) + dataset_label(dataset) +
                      " has a null dataspace (an empty placeholder with no shape) and holds no data");
  PlistHandle dcpl(check_id(H5Dget_create_plist(ds), file, ("cannot read the filters of " + dataset_label(dataset))));
  const int external = H5Pget_external_count(dcpl.get());
  if (external < 0) fail(file, "cannot read the layout of " + dataset_label(dataset));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout < 0) fail(file, "cannot read the layout of " + dataset_label(dataset));
  // Both name other files, which the reader would then open: a file must not direct reads elsewhere.
  if (external > 0 || layout == H5D_VIRTUAL)
    throw Unsupported(prefix(file) + dataset_label(dataset) + " keeps its data in " +
                      (external > 0 ? "external raw files" : "other HDF5 files (a virtual dataset)") +
                      ", which trainkit does not follow (copy the data into the file, e.g. with h5py)");
  const int filters = H5Pget_nfilters(dcpl.get());
  if (filters < 0) fail(file, "cannot read the filters of " + dataset_label(dataset));
  for (unsigned i = 0; i < static_cast<unsigned>(filters); ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char name[128] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), i, &flags, &nvalues, nullptr, sizeof name, name, &config);
    if (id < 0) fail(file, "cannot read the filters of " + dataset_label(dataset));
    const htri_t available = H5Zfilter_avail(id);
    if (available < 0) fail(file, "cannot read the filters of " + dataset_label(dataset));
    if (!available)
      throw Unsupported(prefix(file) + dataset_label(dataset) + " is compressed with filter " + std::to_string(id) +
                        " ('" + name +
                        "'), which this HDF5 library does not have (re-save it with gzip compression, e.g. h5py's "
                        "compression=\"gzip\", or uncompressed)");
  }
}

// first times every entry of dims, saturating at UINT64_MAX (a later 0 dimension still makes it 0).
template <typename Dims>
uint64_t saturating_product(uint64_t first, const Dims& dims) {
  for (auto d : dims)
    if (__builtin_mul_overflow(first, static_cast<uint64_t>(d), &first)) first = std::numeric_limits<uint64_t>::max();
  return first;
}

// Raw data stored in one piece must be as large as the dataspace says, and a contiguous dataset's data must
// lie inside the file: libhdf5 1.10 reads past a compact dataset's buffer when its size disagrees.
void check_storage_extent(hid_t ds, const DatasetMeta& m, const std::string& file, uint64_t file_size) {
  const std::string& name = m.info.path;
  PlistHandle dcpl(check_id(H5Dget_create_plist(ds), file, "cannot read the layout of " + dataset_label(name)));
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) return;
  const uint64_t bytes = saturating_product(m.file_element_size, m.dims);
  const std::string what = dataset_label(name) + " of shape " + dims_string(m.dims) + " (" + m.type.name + ") needs " +
                           std::to_string(bytes) + " bytes";
  const std::string todo = " (the file is truncated or damaged; re-create or re-download it)";
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  check(H5Dget_space_status(ds, &status), file, "cannot read the storage of " + dataset_label(name));
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED) return;  // never written: reads give the fill value
  const hsize_t stored = H5Dget_storage_size(ds);
  H5Eclear2(H5E_DEFAULT);  // 0 is also how it reports a failure
  if (stored < bytes)
    throw FormatError(prefix(file) + what + " but its " + (layout == H5D_COMPACT ? "compact" : "contiguous") +
                      " storage holds " + std::to_string(stored) + todo);
  if (layout != H5D_CONTIGUOUS) return;
  const haddr_t addr = H5Dget_offset(ds);
  H5Eclear2(H5E_DEFAULT);
  if (addr == HADDR_UNDEF) return;
  uint64_t end = 0;
  if (__builtin_add_overflow(static_cast<uint64_t>(addr), bytes, &end) || end > file_size)
    throw FormatError(prefix(file) + what + " from byte offset " + std::to_string(addr) +
                      ", past the end of the file at byte " + std::to_string(file_size) + todo);
}

uint64_t checked_bytes(const std::vector<int64_t>& dims, DType dtype, const std::string& file,
                       const std::string& what) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : dims)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > kMaxLoadBytes)
      throw Unsupported(prefix(file) + what +
                        " would need more than the 4 GiB limit of one load in memory (stream it "
                        "with open_hdf5, or read parts of it with read_hdf5_rows)");
  return bytes;
}

// h5py stores numpy.bool as the enum's byte values; anything else is damage.
void map_bools(uint8_t* p, size_t n, const ElementType& t, const std::string& file, const std::string& dataset,
               uint64_t first_element) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == t.true_value)
      p[i] = 1;
    else if (p[i] == t.false_value)
      p[i] = 0;
    else
      throw FormatError(prefix(file) + dataset_label(dataset) + " element " + std::to_string(first_element + i) +
                        " holds the value " + std::to_string(p[i]) +
                        ", which is neither FALSE nor TRUE of its bool enum (the file is damaged; re-create it)");
  }
}

// Reads rows [begin, begin + count) of a dataset of rank >= 1 into dst (count * row elements of t.dtype).
// Caller holds the lock.
void read_block(hid_t ds, hid_t filespace, const DatasetMeta& m, int64_t begin, int64_t count, void* dst,
                const std::string& file) {
  std::vector<hsize_t> start(m.dims.size(), 0), counts = m.dims;
  start[0] = static_cast<hsize_t>(begin);
  counts[0] = static_cast<hsize_t>(count);
  const std::string action = "cannot read rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                             ") of " + dataset_label(m.info.path);
  check(H5Sselect_hyperslab(filespace, H5S_SELECT_SET, start.data(), nullptr, counts.data(), nullptr), file, action);
  SpaceHandle memspace(
      check_id(H5Screate_simple(static_cast<int>(counts.size()), counts.data(), nullptr), file, action));
  check(H5Dread(ds, m.type.mem, memspace.get(), filespace, H5P_DEFAULT, dst), file, action);
}

}  // namespace

// ---- Hdf5File ----

struct Hdf5File::Impl {
  std::string path;
  uint64_t size = 0;
  FileHandle file;

  // The dataset, opened and described, with every check that must pass before reading it.
  std::pair<DatasetHandle, DatasetMeta> open(const std::string& dataset, hid_t dapl = H5P_DEFAULT) const {
    std::string canonical;
    DatasetHandle ds = open_dataset(file.get(), path, dataset, dapl, canonical);
    DatasetMeta m = describe(ds.get(), path, canonical);
    return {std::move(ds), std::move(m)};
  }
  void require(hid_t ds, const DatasetMeta& m) const {
    require_readable(ds, m, path);
    check_storage_extent(ds, m, path, size);
  }
};

Hdf5File::Hdf5File(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  Lock lock;
  impl_->size = precheck(path);
  hdf5_isolation::preflight(path);  // libhdf5 meets the file in the helper process first
  impl_->file = FileHandle(check_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open the file"));
}

Hdf5File::~Hdf5File() = default;
Hdf5File::Hdf5File(Hdf5File&&) noexcept = default;
Hdf5File& Hdf5File::operator=(Hdf5File&&) noexcept = default;

const std::string& Hdf5File::path() const { return impl_->path; }

std::vector<Hdf5DatasetInfo> Hdf5File::list() const {
  Lock lock;
  std::vector<Hdf5DatasetInfo> out;
  for (const std::string& p : dataset_paths(impl_->file.get(), impl_->path)) out.push_back(info(p));
  return out;
}

Hdf5DatasetInfo Hdf5File::info(const std::string& dataset) const {
  Lock lock;
  return impl_->open(dataset).second.info;
}

Tensor Hdf5File::load(const std::string& dataset) const {
  Lock lock;
  auto [ds, m] = impl_->open(dataset);
  impl_->require(ds.get(), m);
  checked_bytes(m.info.shape.dims(), m.type.dtype, impl_->path,
                dataset_label(m.info.path) + " " + m.info.shape.to_string());
  Tensor t(m.info.shape, m.type.dtype, Device::cpu(), impl_->path + ":" + m.info.path);
  if (t.numel() == 0) return t;
  check(H5Dread(ds.get(), m.type.mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw()), impl_->path,
        "cannot read " + dataset_label(m.info.path));
  if (m.type.is_bool) map_bools(static_cast<uint8_t*>(t.raw()), t.nbytes(), m.type, impl_->path, m.info.path, 0);
  return t;
}

Tensor Hdf5File::read_rows(const std::string& dataset, int64_t begin, int64_t count) const {
  Lock lock;
  auto [ds, m] = impl_->open(dataset);
  impl_->require(ds.get(), m);
  const std::string& name = m.info.path;
  if (m.dims.empty())
    throw InvalidArgument(prefix(impl_->path) + dataset_label(name) + " is a scalar and has no rows (use load_hdf5)");
  const int64_t rows = m.info.shape[0];
  if (begin < 0 || count < 0 || begin > rows || count > rows - begin)
    throw InvalidArgument(prefix(impl_->path) + "rows [" + std::to_string(begin) + ", " + std::to_string(begin) +
                          " + " + std::to_string(count) + ") are out of range for " + dataset_label(name) +
                          " of shape " + m.info.shape.to_string() +
                          " (pass 0 <= begin <= begin + count <= " + std::to_string(rows) + ")");
  Shape shape = m.info.shape.with_batch(count);
  checked_bytes(
      shape.dims(), m.type.dtype, impl_->path,
      "rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ") of " + dataset_label(name));
  Tensor t(shape, m.type.dtype, Device::cpu(), impl_->path + ":" + name);
  if (t.numel() == 0) return t;
  SpaceHandle filespace(check_id(H5Dget_space(ds.get()), impl_->path, ("cannot read " + dataset_label(name))));
  read_block(ds.get(), filespace.get(), m, begin, count, t.raw(), impl_->path);
  if (m.type.is_bool)
    map_bools(static_cast<uint8_t*>(t.raw()), t.nbytes(), m.type, impl_->path, name,
              static_cast<uint64_t>(begin) * (t.nbytes() / static_cast<uint64_t>(count)));
  return t;
}

std::vector<Hdf5DatasetInfo> list_hdf5(const std::string& file) { return Hdf5File(file).list(); }

Tensor load_hdf5(const std::string& file, const std::string& dataset) { return Hdf5File(file).load(dataset); }

Tensor read_hdf5_rows(const std::string& file, const std::string& dataset, int64_t begin, int64_t count) {
  return Hdf5File(file).read_rows(dataset, begin, count);
}

// ---- Hdf5Reader ----

struct Hdf5Reader::Impl {
  struct Stream {
    DatasetHandle ds;
    SpaceHandle filespace;
    DatasetMeta meta;
    Shape row_shape;
    size_t row_bytes = 0;
    int64_t rows_per_read = 1;
    std::vector<uint8_t> block;
    int64_t block_begin = 0, block_rows = 0;
  };
  Hdf5File file;  // declared before the streams, so their datasets close before the file
  std::vector<Stream> streams;
  int64_t rows = 0;
  int64_t row = 0;
  size_t peak = 0;

  explicit Impl(const std::string& path) : file(path) {}

  void fill(Stream& s) {
    const int64_t n = std::min(s.rows_per_read, rows - row);
    const size_t bytes = static_cast<size_t>(n) * s.row_bytes;
    if (s.block.size() < bytes) {
      s.block.resize(bytes);
      s.block.shrink_to_fit();
      size_t total = 0;
      for (const Stream& o : streams) total += o.block.size();
      peak = std::max(peak, total);
    }
    if (bytes) {
      Lock lock;
      read_block(s.ds.get(), s.filespace.get(), s.meta, row, n, s.block.data(), file.path());
    }
    if (s.meta.type.is_bool)
      map_bools(s.block.data(), bytes, s.meta.type, file.path(), s.meta.info.path,
                static_cast<uint64_t>(row) * s.row_bytes);
    s.block_begin = row;
    s.block_rows = n;
  }
};

Hdf5Reader::Hdf5Reader(const std::string& file, std::vector<std::string> datasets, int64_t rows_per_read)
    : impl_(std::make_unique<Impl>(file)) {
  if (datasets.empty())
    throw InvalidArgument(prefix(file) + "open_hdf5 needs at least one dataset to stream (e.g. {\"/x\", \"/y\"})");
  if (rows_per_read < 0)
    throw InvalidArgument(prefix(file) + "rows_per_read is " + std::to_string(rows_per_read) +
                          " (pass a positive number of rows, or 0 to read whole chunks of about 1 MiB)");
  Lock lock;
  const std::string& path = impl_->file.path();
  std::string first_name;
  for (const std::string& name : datasets) {
    // Opened once to learn the chunk size, then again with a chunk cache sized to it.
    auto [probe, probe_meta] = impl_->file.impl_->open(name);
    impl_->file.impl_->require(probe.get(), probe_meta);
    const DatasetMeta& m = probe_meta;
    if (m.dims.empty())
      throw InvalidArgument(prefix(path) + dataset_label(m.info.path) +
                            " is a scalar and has no rows to stream (load it with load_hdf5)");
    const int64_t rows = m.info.shape[0];
    if (first_name.empty()) {
      first_name = m.info.path;
      impl_->rows = rows;
    } else if (rows != impl_->rows) {
      throw InvalidArgument(prefix(path) + dataset_label(first_name) + " has " + std::to_string(impl_->rows) +
                            " rows but " + dataset_label(m.info.path) + " has " + std::to_string(rows) +
                            " (stream datasets that hold the same samples, one per row)");
    }
    Impl::Stream s;
    s.row_shape = m.info.shape.sample_shape();
    const std::string what = "one row of " + dataset_label(m.info.path) + " " + m.info.shape.to_string();
    s.row_bytes = static_cast<size_t>(checked_bytes(s.row_shape.dims(), m.type.dtype, path, what));
    // One chunk in the file, for the chunk cache.
    const uint64_t chunk_bytes = m.info.chunk.empty() ? 0 : saturating_product(m.file_element_size, m.info.chunk);
    int64_t rpr = rows_per_read;
    if (rpr == 0) {
      const uint64_t row = std::max<uint64_t>(s.row_bytes, 1);
      const auto chunk_rows = m.info.chunk.empty() ? 0 : static_cast<uint64_t>(m.info.chunk[0]);
      uint64_t chunk_rows_bytes = 0;
      if (chunk_rows > 0 && !__builtin_mul_overflow(chunk_rows, row, &chunk_rows_bytes) &&
          chunk_rows_bytes <= kMaxAlignedBlockBytes)
        rpr = static_cast<int64_t>(chunk_rows * std::max<uint64_t>(1, kTargetBlockBytes / chunk_rows_bytes));
      else
        rpr = static_cast<int64_t>(std::max<uint64_t>(1, kTargetBlockBytes / row));
    }
    s.rows_per_read = std::max<int64_t>(1, std::min(rpr, rows));
    checked_bytes({s.rows_per_read}, DType::u8, path,
                  std::to_string(s.rows_per_read) + " rows of " + dataset_label(m.info.path) + " per read");
    if (static_cast<uint64_t>(s.rows_per_read) * s.row_bytes > kMaxLoadBytes)
      throw InvalidArgument(prefix(path) + "rows_per_read " + std::to_string(s.rows_per_read) + " of " +
                            dataset_label(m.info.path) + " would need more than 4 GiB per read (pass fewer rows)");

    PlistHandle dapl(check_id(H5Pcreate(H5P_DATASET_ACCESS), path, "cannot create a dataset access list"));
    const uint64_t cache = std::clamp(chunk_bytes, kMinChunkCache, kMaxChunkCache);
    check(H5Pset_chunk_cache(dapl.get(), kChunkCacheSlots, static_cast<size_t>(cache), 1.0), path,
          "cannot set the chunk cache of " + dataset_label(m.info.path));
    auto [ds, meta] = impl_->file.impl_->open(m.info.path, dapl.get());
    s.filespace = SpaceHandle(check_id(H5Dget_space(ds.get()), path, ("cannot read " + dataset_label(m.info.path))));
    s.ds = std::move(ds);
    s.meta = std::move(meta);
    impl_->streams.push_back(std::move(s));
  }
}

Hdf5Reader::~Hdf5Reader() = default;

bool Hdf5Reader::next(Element& out) {
  Impl& r = *impl_;
  if (r.row >= r.rows) return false;
  out.resize(r.streams.size());
  for (size_t i = 0; i < r.streams.size(); ++i) {
    Impl::Stream& s = r.streams[i];
    if (r.row < s.block_begin || r.row >= s.block_begin + s.block_rows) r.fill(s);
    Tensor t(s.row_shape, s.meta.type.dtype);
    if (s.row_bytes)
      std::memcpy(t.raw(), s.block.data() + static_cast<size_t>(r.row - s.block_begin) * s.row_bytes, s.row_bytes);
    out[i] = std::move(t);
  }
  ++r.row;
  return true;
}

std::string Hdf5Reader::position() const {
  return "HDF5 file '" + impl_->file.path() + "' row " + std::to_string(impl_->row) + " of " +
         std::to_string(impl_->rows);
}

int64_t Hdf5Reader::rows() const { return impl_->rows; }

int64_t Hdf5Reader::rows_per_read(size_t dataset) const { return impl_->streams.at(dataset).rows_per_read; }

size_t Hdf5Reader::peak_block_bytes() const { return impl_->peak; }

std::unique_ptr<ElementReader> open_hdf5(const std::string& file, std::vector<std::string> datasets,
                                         int64_t rows_per_read) {
  return std::make_unique<Hdf5Reader>(file, std::move(datasets), rows_per_read);
}

}  // namespace tk::data
