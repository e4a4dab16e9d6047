#include "trainkit/data/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "data/formats/bytes.h"

namespace tk::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader and writer assume a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// NumPy itself refuses headers over 10000 bytes by default; a larger claim is corruption, not a big array.
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;
constexpr int kMaxRank = 64;  // NumPy 2's limit
constexpr int kMaxNesting = 32;
// Data are read (and converted) in chunks of this size, so a conversion needs no second full-size buffer.
constexpr size_t kChunk = size_t{1} << 20;
// Deflate expands at most about 1032:1; a member that claims more than this from its compressed size is corrupt.
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string shape_text(const std::vector<int64_t>& dims) { return Shape(dims).to_string(); }

// ---- where the bytes come from: a file, or a member of a zip archive ----

class Source {
 public:
  virtual ~Source() = default;
  // Reads up to n bytes; fewer only at the end of the stream. Throws on read errors.
  virtual size_t read(void* dst, size_t n) = 0;
  // Reads one byte past the declared size: nothing may follow it (a zip member verifies its CRC here).
  bool has_more() {
    char c;
    return read(&c, 1) != 0;
  }

  uint64_t size = 0;      // of the whole .npy stream, known before reading it
  std::string prefix;     // "NPY file 'x.npy': " or "NPZ file 'a.npz', member 'x.npy': "
  std::string of_member;  // "" or " of the member", after byte offsets
  std::string owner;      // names the tensor's memory

  std::string at(uint64_t offset) const { return "at byte offset " + std::to_string(offset) + of_member; }
  [[noreturn]] void fail(const std::string& problem, uint64_t offset, const std::string& detail,
                         const std::string& todo) const {
    throw FormatError(prefix + problem + " " + at(offset) + ": " + detail + " (" + todo + ")");
  }
  // Reads exactly n bytes, or fails as truncated (the size check makes that rare: a file that shrinks).
  void read_exact(void* dst, size_t n, uint64_t offset, const std::string& what) {
    size_t got = read(dst, n);
    if (got != n)
      fail("truncated " + what, offset + got, "expected " + std::to_string(n) + " bytes, got " + std::to_string(got),
           "the file changed while it was read, or is corrupt; re-create it");
  }
};

class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) {
    prefix = "NPY file '" + path + "': ";
    owner = path;
    file_ = open_file(path, prefix);
    struct stat st {};
    if (fstat(fileno(file_), &st) != 0) {
      int e = errno;
      std::fclose(file_);
      throw IoError(prefix + "cannot stat: " + std::strerror(e) + " (check the file)");
    }
    if (!S_ISREG(st.st_mode)) {
      std::fclose(file_);
      throw IoError(prefix + (S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file") +
                    " (load_npy checks the data length against the file size before reading; pass a .npy file)");
    }
    size = static_cast<uint64_t>(st.st_size);
  }
  ~FileSource() override { std::fclose(file_); }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  size_t read(void* dst, size_t n) override {
    errno = 0;
    size_t got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_))
      throw IoError(prefix + "read failed at byte offset " + std::to_string(offset_ + got) + ": " +
                    (errno ? std::strerror(errno) : "unknown error") + " (check the file and the disk)");
    offset_ += got;
    return got;
  }

 private:
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
};

bool is_io_error(int code) {
  return code == ZIP_ER_OPEN || code == ZIP_ER_READ || code == ZIP_ER_SEEK || code == ZIP_ER_TELL ||
         code == ZIP_ER_NOENT;
}

class ZipMemberSource final : public Source {
 public:
  // The archive checks the member's sizes before this opens it.
  ZipMemberSource(zip_t* archive, zip_uint64_t index, const std::string& member_prefix, const std::string& memory_owner,
                  uint64_t member_size) {
    prefix = member_prefix;
    of_member = " of the member";
    owner = memory_owner;
    size = member_size;
    file_ = zip_fopen_index(archive, index, 0);
    if (!file_) {
      zip_error_t* e = zip_get_error(archive);
      std::string msg = prefix + "cannot open the member: " + zip_error_strerror(e);
      if (is_io_error(zip_error_code_zip(e))) throw IoError(msg + " (check the file and the disk)");
      throw FormatError(msg + " (the archive is corrupt or uses a feature libzip lacks; re-create it with np.savez)");
    }
  }
  ~ZipMemberSource() override { zip_fclose(file_); }
  ZipMemberSource(const ZipMemberSource&) = delete;
  ZipMemberSource& operator=(const ZipMemberSource&) = delete;

  size_t read(void* dst, size_t n) override {
    size_t total = 0;
    while (total < n) {
      zip_int64_t got = zip_fread(file_, static_cast<char*>(dst) + total, n - total);
      if (got < 0) fail_read(offset_ + total);
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    offset_ += total;
    return total;
  }

 private:
  [[noreturn]] void fail_read(uint64_t offset) const {
    zip_error_t* e = zip_file_get_error(file_);
    std::string msg = prefix + "cannot read the member " + at(offset) + ": libzip: " + zip_error_strerror(e);
    if (is_io_error(zip_error_code_zip(e))) throw IoError(msg + " (check the file and the disk)");
    throw FormatError(msg + " (the archive is corrupt; re-create it with np.savez)");
  }

  zip_file_t* file_ = nullptr;
  uint64_t offset_ = 0;
};

// ---- the header: a Python dict literal, parsed without evaluating anything ----

struct HeaderError {
  size_t pos;  // in the header text
  std::string message;
  // A well-formed header for an array this reader cannot represent says so, with its own advice.
  std::string problem = "bad header";
  std::string todo = "the file is corrupt or was not written by np.save";
};

struct PyValue {
  enum class Kind { str, integer, boolean, none, tuple, list, dict };  // kind_name's order
  Kind kind = Kind::none;
  size_t pos = 0;
  std::string str;
  int64_t integer = 0;
  bool overflow = false;  // an integer beyond int64
  bool flag = false;
  std::vector<PyValue> items;  // tuple / list elements; a dict's keys and values alternate
};

const char* kind_name(PyValue::Kind k) {
  static constexpr const char* kNames[] = {"a string", "an integer", "a bool", "None", "a tuple", "a list", "a dict"};
  static_assert(std::size(kNames) == static_cast<size_t>(PyValue::Kind::dict) + 1, "one name per Kind");
  return kNames[static_cast<size_t>(k)];
}

// The subset of Python literals a .npy header uses: dicts, tuples, lists, strings, integers (with Python 2's
// 'L' suffix, which old NumPy wrote), True, False and None. Anything else is an error, never evaluated.
class PyLiteralParser {
 public:
  explicit PyLiteralParser(std::string_view text) : s_(text) {}

  PyValue parse() {
    PyValue v = value(0);
    skip_space();
    if (i_ != s_.size()) fail(i_, "unexpected " + here() + " after the header's value");
    return v;
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& message) const { throw HeaderError{pos, message}; }
  std::string here() const { return i_ < s_.size() ? "character " + quoted(s_.substr(i_, 1)) : "end of header"; }
  void skip_space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\f' || s_[i_] == '\v'))
      ++i_;
  }
  int peek() const { return i_ < s_.size() ? static_cast<unsigned char>(s_[i_]) : -1; }
  static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool is_digit(int c) { return c >= '0' && c <= '9'; }

  PyValue value(int depth) {
    skip_space();
    if (depth > kMaxNesting) fail(i_, "values nested more than " + std::to_string(kMaxNesting) + " deep");
    PyValue v;
    v.pos = i_;
    int c = peek();
    if (c == '{') {
      v.kind = PyValue::Kind::dict;
      sequence(v, '}', depth, true);
    } else if (c == '[') {
      v.kind = PyValue::Kind::list;
      sequence(v, ']', depth, false);
    } else if (c == '(') {
      v.kind = PyValue::Kind::tuple;
      if (sequence(v, ')', depth, false)) {
        PyValue inner = std::move(v.items[0]);  // "(3)" is 3 in Python, not a tuple
        return inner;
      }
    } else if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::str;
      v.str = string();
    } else if (is_digit(c) || c == '-' || c == '+') {
      v.kind = PyValue::Kind::integer;
      integer(v);
    } else if (is_alpha(c)) {
      size_t start = i_;
      while (is_alpha(peek()) || is_digit(peek())) ++i_;
      std::string_view name = s_.substr(start, i_ - start);
      if (name == "True" || name == "False") {
        v.kind = PyValue::Kind::boolean;
        v.flag = name == "True";
      } else if (name != "None") {
        fail(start, "unexpected name " + quoted(name) + " (only True, False and None are literals)");
      }
    } else {
      fail(i_, c < 0 ? "the header ends where a value should start" : "unexpected " + here());
    }
    return v;
  }

  // Parses "{k: v, ...}", "[a, ...]" or "(a, ...)" with an optional trailing comma. Returns true for a
  // parenthesised single value without a comma.
  bool sequence(PyValue& v, char close, int depth, bool dict) {
    ++i_;
    bool comma = false;
    for (;;) {
      skip_space();
      if (peek() == close) {
        ++i_;
        break;
      }
      if (!v.items.empty() && !comma) fail(i_, "expected ',' or '" + std::string(1, close) + "', found " + here());
      PyValue item = value(depth + 1);
      if (dict) {
        if (item.kind != PyValue::Kind::str)
          fail(item.pos, "dict keys must be strings, found " + std::string(kind_name(item.kind)));
        skip_space();
        if (peek() != ':') fail(i_, "expected ':' after the key " + quoted(item.str) + ", found " + here());
        ++i_;
        for (size_t k = 0; k < v.items.size(); k += 2)
          if (v.items[k].str == item.str) fail(item.pos, "the key " + quoted(item.str) + " appears twice");
        v.items.push_back(std::move(item));
        v.items.push_back(value(depth + 1));
      } else {
        v.items.push_back(std::move(item));
      }
      skip_space();
      comma = peek() == ',';
      if (comma) ++i_;
    }
    return close == ')' && v.items.size() == 1 && !comma;
  }

  std::string string() {
    char q = s_[i_++];
    std::string out;
    for (;;) {
      if (i_ >= s_.size() || s_[i_] == '\n') fail(i_, "unterminated string");
      char c = s_[i_++];
      if (c == q) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail(i_, "unterminated string");
      char e = s_[i_++];
      // Escapes \n \t \r \0 \\ \' \" and what each stands for.
      static constexpr std::string_view kEscapes = "ntr0\\'\"", kMeanings("\n\t\r\0\\'\"", 7);
      const size_t k = kEscapes.find(e);
      if (k == std::string_view::npos) out += '\\';  // Python keeps the backslash of an unknown escape
      out += k == std::string_view::npos ? e : kMeanings[k];
    }
  }

  void integer(PyValue& v) {
    bool negative = peek() == '-';
    if (peek() == '-' || peek() == '+') ++i_;
    if (!is_digit(peek())) fail(i_, "expected a digit, found " + here());
    constexpr uint64_t kLimit = uint64_t{1} << 63;  // |INT64_MIN|
    uint64_t magnitude = 0;
    while (is_digit(peek())) {
      auto d = static_cast<uint64_t>(s_[i_++] - '0');
      if (magnitude > (kLimit - d) / 10) v.overflow = true;  // keeps consuming the digits
      if (!v.overflow) magnitude = magnitude * 10 + d;
    }
    if (peek() == 'L' || peek() == 'l') ++i_;  // Python 2 long
    if (is_alpha(peek()) || is_digit(peek()) || peek() == '.')
      fail(i_, "unexpected " + here() + " in a number (header integers are plain decimals)");
    if (!negative && magnitude == kLimit) v.overflow = true;
    if (v.overflow) return;
    // Two's complement wrap-around, defined since C++20, also gives INT64_MIN for -2^63.
    v.integer = static_cast<int64_t>(negative ? 0 - magnitude : magnitude);
  }

  std::string_view s_;
  size_t i_ = 0;
};

// ---- element types ----

struct NpyType {
  char kind = 0;  // 'f', 'i', 'u' or 'b'
  size_t size = 0;
  bool swap = false;  // big-endian data on this little-endian host
  DType dtype = DType::f32;
  // Elements are read into the tensor as they are: the file's element is the tensor's, perhaps byte-swapped
  // (big-endian data are then swapped in place, booleans normalised to 0/1 in place).
  bool direct() const {
    return (kind == 'f' && size != 8) || (kind == 'i' && size >= 4) || (kind == 'u' && size == 1) || kind == 'b';
  }
};

// Maps a descr such as '<f4' to t; returns "" or why it cannot.
HeaderError descr_problem(const std::string& d, NpyType& t) {
  std::string_view s = d;
  char order = '=';
  if (!s.empty() && (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=')) order = s[0], s.remove_prefix(1);
  if (s.empty()) return {0, "descr " + quoted(d) + " names no type"};
  char kind = s[0];
  s.remove_prefix(1);
  size_t size = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || size > 1000) {
      size = 0;
      break;
    }
    size = size * 10 + static_cast<size_t>(c - '0');
  }
  auto unsupported = [&](const std::string& what, const std::string& todo) {
    return HeaderError{0, quoted(d) + " is " + what + ", which has no trainkit dtype", "unsupported dtype", todo};
  };
  switch (kind) {
    case 'c':
      return unsupported("complex", "save the real and imaginary parts as separate float arrays");
    case 'O':
      return unsupported("an object array (pickled Python objects)", "save a numeric array");
    case 'U':
    case 'S':
    case 'a':
      return unsupported("a string type", "encode the strings as numbers before saving");
    case 'M':
    case 'm':
      return unsupported("a datetime type", "save arr.view('i8') and convert after loading");
    case 'V':
      return unsupported("raw bytes (e.g. ml_dtypes' bfloat16)", "save arr.astype(np.float32)");
    default:
      break;
  }
  bool ok = (kind == 'f' && (size == 2 || size == 4 || size == 8)) ||
            ((kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8)) ||
            (kind == 'b' && size == 1);
  if (!ok) {
    if (kind == 'f' && (size == 12 || size == 16)) return unsupported("a long double", "save arr.astype(np.float64)");
    return HeaderError{
        0, "descr " + quoted(d) + " is not a dtype this reader knows (float16/32/64, int8..64, uint8..64 or bool)",
        "unsupported dtype", "the header is corrupt, or save arr.astype(np.float32)"};
  }
  t.kind = kind;
  t.size = size;
  t.swap = order == '>' && size > 1;
  if (kind == 'f') t.dtype = size == 2 ? DType::f16 : DType::f32;
  if (kind == 'i') t.dtype = size == 8 ? DType::i64 : DType::i32;
  if (kind == 'u') t.dtype = size == 1 ? DType::u8 : size == 2 ? DType::i32 : DType::i64;
  if (kind == 'b') t.dtype = DType::boolean;
  return {0, ""};
}

struct NpyHeader {
  std::string descr;
  NpyType type;
  bool fortran = false;
  std::vector<int64_t> shape;
};

NpyHeader interpret_header(const PyValue& v) {
  if (v.kind != PyValue::Kind::dict)
    throw HeaderError{v.pos, "the header is " + std::string(kind_name(v.kind)) + ", not a dict"};
  static constexpr std::string_view kKeys[] = {"descr", "fortran_order", "shape"};
  const PyValue* values[std::size(kKeys)] = {};  // by key
  for (size_t k = 0; k < v.items.size(); k += 2) {
    const PyValue& key = v.items[k];
    const auto* at = std::ranges::find(kKeys, key.str);
    if (at == std::end(kKeys))
      throw HeaderError{key.pos, "unexpected key " + quoted(key.str) +
                                     " (a .npy header has exactly 'descr', 'fortran_order' and 'shape')"};
    values[at - kKeys] = &v.items[k + 1];
  }
  for (size_t i = 0; i < std::size(kKeys); ++i)
    if (!values[i]) throw HeaderError{v.pos, "the key '" + std::string(kKeys[i]) + "' is missing"};
  const PyValue *descr = values[0], *fortran = values[1], *shape = values[2];

  NpyHeader h;
  if (descr->kind == PyValue::Kind::list)
    throw HeaderError{descr->pos, "'descr' is a list, so this is a structured array, which has no trainkit dtype",
                      "unsupported dtype", "save each field as its own array"};
  if (descr->kind != PyValue::Kind::str)
    throw HeaderError{descr->pos, "'descr' is " + std::string(kind_name(descr->kind)) + ", not a string"};
  h.descr = descr->str;
  HeaderError problem = descr_problem(h.descr, h.type);
  if (!problem.message.empty()) {
    problem.pos = descr->pos;
    throw problem;
  }

  if (fortran->kind != PyValue::Kind::boolean)
    throw HeaderError{fortran->pos,
                      "'fortran_order' is " + std::string(kind_name(fortran->kind)) + ", not True or False"};
  h.fortran = fortran->flag;

  if (shape->kind != PyValue::Kind::tuple)
    throw HeaderError{shape->pos, "'shape' is " + std::string(kind_name(shape->kind)) + ", not a tuple"};
  if (shape->items.size() > static_cast<size_t>(kMaxRank))
    throw HeaderError{shape->pos, "'shape' has " + std::to_string(shape->items.size()) + " dimensions, more than " +
                                      std::to_string(kMaxRank)};
  for (const PyValue& d : shape->items) {
    if (d.kind != PyValue::Kind::integer)
      throw HeaderError{d.pos, "a dimension in 'shape' is " + std::string(kind_name(d.kind)) + ", not an integer"};
    if (d.overflow || d.integer < 0)
      throw HeaderError{
          d.pos, "a dimension in 'shape' is " + (d.overflow ? std::string("too large") : std::to_string(d.integer))};
    h.shape.push_back(d.integer);
  }
  return h;
}

// ---- data ----

// A value of the array's byte order (big-endian when `swap`) in host order.
template <ByteWord U>
U load(const uint8_t* p, bool swap) {
  return swap ? load_be<U>(p) : load_le<U>(p);
}

template <typename T>
void store(uint8_t* dst, size_t i, T v) {
  std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
}

// Converts n elements of a type that is not direct() from src into dst (the tensor's dtype). `first_offset`
// is src's byte offset in the stream, for the one value that can fail: a uint64 above INT64_MAX.
void convert(const NpyType& t, const uint8_t* src, size_t n, uint8_t* dst, const Source& in, uint64_t first_offset) {
  const bool sw = t.swap;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = src + i * t.size;
    switch (t.kind) {
      case 'f':  // float64 (float16 and float32 are read directly)
        store(dst, i, narrow_to_float(std::bit_cast<double>(load<uint64_t>(p, sw))));
        break;
      case 'i':  // int8, int16 (int32 and int64 are read directly)
        if (t.size == 1) store(dst, i, int32_t{static_cast<int8_t>(*p)});
        if (t.size == 2) store(dst, i, int32_t{static_cast<int16_t>(load<uint16_t>(p, sw))});
        break;
      case 'u':  // uint16, uint32, uint64 (uint8 is read directly)
        if (t.size == 2) store(dst, i, int32_t{load<uint16_t>(p, sw)});
        if (t.size == 4) store(dst, i, int64_t{load<uint32_t>(p, sw)});
        if (t.size == 8) {
          uint64_t u = load<uint64_t>(p, sw);
          if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            in.fail("uint64 value out of range", first_offset + i * 8,
                    std::to_string(u) + " does not fit int64, which uint64 arrays load as",
                    "save the array as float64, or as int64 if its values fit");
          store(dst, i, static_cast<int64_t>(u));
        }
        break;
    }
  }
}

// C order from Fortran order: src holds the array with its axes reversed (Fortran order of `dims` is C order
// of the reversed shape); dst gets `dims` in C order. Both hold numel * elem bytes.
void reverse_axes(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& dims, size_t elem) {
  const size_t rank = dims.size();
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  if (rank < 2 || numel == 0) {
    if (numel) std::memcpy(dst, src, static_cast<size_t>(numel) * elem);
    return;
  }
  std::vector<int64_t> stride(rank), index(rank, 0);  // (rank,) element strides of src along each axis of dst
  int64_t s = 1;
  for (size_t k = 0; k < rank; ++k) stride[k] = s, s *= dims[k];
  int64_t from = 0;
  for (int64_t i = 0; i < numel; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * elem, src + static_cast<size_t>(from) * elem, elem);
    for (size_t k = rank; k-- > 0;) {  // odometer: the last axis moves fastest
      from += stride[k];
      if (++index[k] < dims[k]) break;
      from -= stride[k] * dims[k];
      index[k] = 0;
    }
  }
}

Tensor read_npy(Source& in) {
  // Magic (6 bytes), version (2), header length (2 bytes in version 1.0, 4 in 2.0 and 3.0), header, data.
  uint8_t pre[12] = {};
  size_t got = in.read(pre, 10);
  size_t same = 0;
  while (same < std::min(got, kMagicBytes) && pre[same] == static_cast<uint8_t>(kMagic[same])) ++same;
  if (same < std::min(got, kMagicBytes)) {
    std::string hint = "this is not a .npy file";
    if (got >= 4 && std::memcmp(pre, "PK\x03\x04", 4) == 0) hint = "this is a zip archive; an .npz? use load_npz";
    if (got >= 1 && pre[0] == 0x80) hint = "this looks like a Python pickle, not np.save output";
    in.fail("bad magic", same,
            "found bytes " + hex_bytes(pre, std::min(got, kMagicBytes)) +
                ", expected 93 4e 55 4d 50 59 (\\x93NUMPY); " + hint,
            "check the path, or re-create the file with np.save");
  }
  if (got < 10)
    in.fail("truncated header", got,
            got == 0
                ? std::string("the file is empty")
                : "expected at least 10 bytes (magic, version, header length), the file holds " + std::to_string(got),
            "re-create the file with np.save");
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    in.fail("unsupported format version", 6,
            "version " + std::to_string(major) + "." + std::to_string(minor) + " (this reader knows 1.0, 2.0 and 3.0)",
            "re-save the array with np.save, or the file is corrupt");
  uint64_t header_len = uint64_t{pre[8]} | uint64_t{pre[9]} << 8;
  uint64_t header_start = 10;
  if (major >= 2) {
    if (in.size < 12)
      in.fail("truncated header", in.size, "a version " + std::to_string(major) + ".0 header length takes 4 bytes",
              "re-create the file with np.save");
    in.read_exact(pre + 10, 2, 10, "header length");
    header_len = load_le<uint32_t>(pre + 8);
    header_start = 12;
  }
  if (header_len > kMaxHeaderBytes)
    in.fail("header too long", 8,
            "the header claims " + std::to_string(header_len) + " bytes, more than the " +
                std::to_string(kMaxHeaderBytes >> 20) + " MiB a real one could need",
            "the file is corrupt; re-create it with np.save");
  if (header_start + header_len > in.size)
    in.fail("truncated header", in.size,
            "the header claims " + std::to_string(header_len) + " bytes from byte offset " +
                std::to_string(header_start) + " but only " + std::to_string(in.size - header_start) + " follow",
            "re-create the file with np.save");
  std::string text(static_cast<size_t>(header_len), '\0');
  in.read_exact(text.data(), text.size(), header_start, "header");

  NpyHeader h;
  try {
    h = interpret_header(PyLiteralParser(text).parse());
  } catch (const HeaderError& e) {
    std::string_view shown = text;  // without NumPy's padding
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.remove_suffix(1);
    in.fail(e.problem, header_start + e.pos, e.message + "; the header is " + quoted(shown, 120), e.todo);
  }

  // Checked against the bytes present before anything is allocated.
  const uint64_t data_start = header_start + header_len;
  const uint64_t present = in.size - data_start;
  std::string what = "shape " + shape_text(h.shape) + " of " + quoted(h.descr);
  // Like NumPy, the size without its zero dimensions must fit int64 too: (0, 2^40, 2^40) is no array.
  uint64_t need = h.type.size;
  bool overflow = false, empty = false;
  for (int64_t d : h.shape) {
    empty = empty || d == 0;
    if (d != 0) overflow = overflow || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
  }
  if (overflow || need > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    in.fail("array too large", header_start, what + " would need more than 2^63 bytes",
            "the header is corrupt; re-create the file");
  if (empty) need = 0;
  if (need > present)
    in.fail("truncated data", data_start + present,
            what + " needs " + std::to_string(need) + " data bytes, but only " + std::to_string(present) +
                " follow the header",
            "the file was cut short or the header is corrupt; re-create it");
  if (need < present)
    in.fail(
        "trailing bytes", data_start + need,
        what + " needs " + std::to_string(need) + " data bytes, but " + std::to_string(present) + " follow the header",
        "the header does not match the data; re-create the file");

  // A Fortran-order array is read as its axes reversed, then transposed.
  std::vector<int64_t> stored = h.shape;
  if (h.fortran) std::reverse(stored.begin(), stored.end());
  Tensor out(Shape(stored), h.type.dtype, Device::cpu(), in.owner);
  auto* dst = static_cast<uint8_t*>(out.raw());
  const auto numel = static_cast<size_t>(out.numel());
  if (h.type.direct()) {
    for (size_t done = 0; done < need;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(need - done, uint64_t{1} << 30));
      in.read_exact(dst + done, n, data_start + done, "data");
      done += n;
    }
    if (h.type.swap) byteswap_in_place(dst, numel, h.type.size);
    if (h.type.kind == 'b')
      for (size_t i = 0; i < numel; ++i) dst[i] = dst[i] != 0;
  } else {
    const size_t per_chunk = kChunk / h.type.size;
    const size_t out_size = dtype_size(h.type.dtype);
    std::vector<uint8_t> chunk(std::min(numel, per_chunk) * h.type.size);  // (elements, itemsize) raw bytes
    for (size_t done = 0; done < numel;) {
      size_t n = std::min(numel - done, per_chunk);
      uint64_t offset = data_start + done * h.type.size;
      in.read_exact(chunk.data(), n * h.type.size, offset, "data");
      convert(h.type, chunk.data(), n, dst + done * out_size, in, offset);
      done += n;
    }
  }
  if (in.has_more())
    in.fail("trailing bytes", in.size, "the data end here but the stream goes on",
            "the file changed while it was read, or is corrupt; re-create it");
  if (!h.fortran || h.shape.size() < 2) return out;
  Tensor c_order(Shape(h.shape), h.type.dtype, Device::cpu(), in.owner);
  reverse_axes(dst, static_cast<uint8_t*>(c_order.raw()), h.shape, dtype_size(h.type.dtype));
  return c_order;
}

// ---- npz ----

class ZipArchive {
 public:
  explicit ZipArchive(const std::string& path) : path_(path), prefix_("NPZ file '" + path + "': ") {
    // Opened here first for errno's words (libzip reports only "Can't open file"), the size and the magic.
    std::FILE* f = open_file(path, prefix_);
    struct stat st {};
    bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    bool directory = !regular && S_ISDIR(st.st_mode);
    char head[kMagicBytes] = {};
    size_t got = regular ? std::fread(head, 1, kMagicBytes, f) : 0;
    std::fclose(f);
    if (directory) throw IoError(prefix_ + "is a directory (pass an .npz file)");
    if (regular) {
      file_size_ = static_cast<uint64_t>(st.st_size);
      if (file_size_ == 0)
        throw FormatError(prefix_ +
                          "not a zip archive at byte offset 0: the file is empty (re-create it with np.savez)");
    }
    if (got == kMagicBytes && std::memcmp(head, kMagic, kMagicBytes) == 0)
      npy_hint_ = "; byte offset 0 holds \\x93NUMPY, so this is an .npy file: use load_npy";
    int code = 0;
    archive_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
    if (!archive_) {
      zip_error_t e;
      zip_error_init_with_code(&e, code);
      std::string msg = zip_error_strerror(&e);
      zip_error_fini(&e);
      if (is_io_error(code))
        throw IoError(prefix_ + "cannot open: libzip: " + msg + " (check the path and its permissions)");
      if (code == ZIP_ER_MEMORY) throw OutOfMemoryError(prefix_ + "libzip ran out of memory opening the archive");
      throw FormatError(prefix_ + "not a valid zip archive: libzip: " + msg + npy_hint_ +
                        " (np.savez writes zip archives; re-create the file or check the path)");
    }
  }
  ~ZipArchive() {
    if (archive_) zip_discard(archive_);
  }
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  struct Member {
    zip_uint64_t index;
    std::string name;
  };
  std::vector<Member> members() const {
    zip_int64_t n = zip_get_num_entries(archive_, 0);
    std::vector<Member> out;
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(archive_, static_cast<zip_uint64_t>(i), 0);
      if (!name)
        throw FormatError(prefix_ + "cannot read the name of member " + std::to_string(i) + ": libzip: " +
                          zip_strerror(archive_) + " (the archive is corrupt; re-create it with np.savez)");
      out.push_back({static_cast<zip_uint64_t>(i), name});
    }
    return out;
  }

  Tensor load(const Member& m) {
    std::string member = prefix_.substr(0, prefix_.size() - 2) + ", member " + quoted(m.name, 200) + ": ";
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive_, m.index, 0, &st) != 0)
      throw FormatError(member + "cannot read its directory entry: libzip: " + zip_strerror(archive_) +
                        " (the archive is corrupt; re-create it with np.savez)");
    const zip_uint64_t need = ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
    if ((st.valid & need) != need)
      throw FormatError(member +
                        "its directory entry lacks sizes or the compression method (the archive is corrupt; "
                        "re-create it with np.savez)");
    if (st.encryption_method != ZIP_EM_NONE)
      throw FormatError(member + "the member is encrypted (save the arrays with np.savez, which does not encrypt)");
    // Sizes are checked before the member's size decides any allocation.
    if (file_size_ && st.comp_size > file_size_)
      throw FormatError(member + "its directory entry claims " + std::to_string(st.comp_size) +
                        " compressed bytes, more than the archive's " + std::to_string(file_size_) +
                        " (the archive is truncated or corrupt; re-create it)");
    if (st.comp_method == ZIP_CM_STORE) {
      if (st.size != st.comp_size)
        throw FormatError(member + "the stored (uncompressed) member claims " + std::to_string(st.size) +
                          " bytes but occupies " + std::to_string(st.comp_size) +
                          " (the archive is corrupt; re-create it)");
    } else if (st.comp_method == ZIP_CM_DEFLATE) {
      if (st.size / kMaxDeflateRatio > st.comp_size + 1)
        throw FormatError(member + "the member claims " + std::to_string(st.size) + " bytes from " +
                          std::to_string(st.comp_size) +
                          " compressed ones, more than deflate can produce (the archive is corrupt; re-create it)");
    } else {
      throw FormatError(member + "compression method " + std::to_string(st.comp_method) +
                        " is not supported (np.savez stores members, np.savez_compressed deflates them; "
                        "re-create the archive with one of those)");
    }
    ZipMemberSource source(archive_, m.index, member, path_ + ":" + m.name, st.size);
    return read_npy(source);
  }

  const std::string& prefix() const { return prefix_; }

 private:
  std::string path_;
  std::string prefix_;
  uint64_t file_size_ = 0;  // 0 when unknown
  std::string npy_hint_;    // a plain .npy passed as an .npz is a likely mix-up: the message says so
  zip_t* archive_ = nullptr;
};

[[noreturn]] void save_failed(const char* fn, const std::string& path, const std::string& tmp, const std::string& what,
                              int err) {
  std::remove(tmp.c_str());
  throw IoError(std::string(fn) + "('" + path + "'): " + what + " '" + tmp + "': " + std::strerror(err) +
                " (check that the directory exists, is writable and has space)");
}

// The magic, version 1.0 and the header dict of a .npy file for `tensor` (little-endian, C order), padded as NumPy
// pads it so that the data start on a 64-byte boundary. `where` begins the errors ("save_npy('p.npy')").
std::string npy_preamble(const std::string& where, const Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgument(where + ": the tensor is undefined (pass one with data)");
  if (tensor.device().kind != DeviceKind::cpu)
    throw InvalidArgument(where + ": the tensor is on " + tensor.device().to_string() + " (copy it to the CPU first)");
  const char* descr = nullptr;
  switch (tensor.dtype()) {
    case DType::f32:
      descr = "<f4";
      break;
    case DType::f16:
      descr = "<f2";
      break;
    case DType::i32:
      descr = "<i4";
      break;
    case DType::i64:
      descr = "<i8";
      break;
    case DType::u8:
      descr = "|u1";
      break;
    case DType::boolean:
      descr = "|b1";
      break;
    case DType::bf16:
      // ml_dtypes' bfloat16 is written as raw '<V2' bytes, which np.load cannot interpret without ml_dtypes.
      throw Unsupported(where +
                        ": the tensor is bfloat16, which has no standard NumPy dtype, so .npy cannot hold it "
                        "(convert it to float32 first, which keeps every value exactly)");
  }
  std::string dims;
  for (int64_t d : tensor.shape().dims()) dims += std::to_string(d) + ", ";
  if (tensor.shape().rank() > 1) dims.resize(dims.size() - 2);  // "(3,)" keeps its comma, "(2, 3)" does not
  if (tensor.shape().rank() == 1) dims.pop_back();
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Like NumPy: pad with spaces and end with a newline so that the data start on a 64-byte boundary.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xFFFF)
    throw InvalidArgument(where + ": the header for shape " + tensor.shape().to_string() +
                          " exceeds version 1.0's 65535 bytes");
  return std::string(kMagic, kMagicBytes) + '\x01' + '\x00' + static_cast<char>(header.size() & 0xFF) +
         static_cast<char>(header.size() >> 8) + header;
}

std::string key_of(const std::string& name) { return name.ends_with(".npy") ? name.substr(0, name.size() - 4) : name; }

}  // namespace

Tensor load_npy(const std::string& path) {
  FileSource in(path);
  return read_npy(in);
}

void save_npy(const std::string& path, const Tensor& tensor) {
  const std::string pre = npy_preamble("save_npy('" + path + "')", tensor);
  const std::string tmp = path + ".tmp";
  errno = 0;
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) save_failed("save_npy", path, tmp, "cannot create", errno);
  bool ok = std::fwrite(pre.data(), 1, pre.size(), f) == pre.size() &&
            (tensor.nbytes() == 0 || std::fwrite(tensor.raw(), 1, tensor.nbytes(), f) == tensor.nbytes()) &&
            std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) save_failed("save_npy", path, tmp, "cannot write", err ? err : EIO);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    save_failed("save_npy", path, tmp, "cannot rename to '" + path + "' from", errno);
}

void save_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  const std::string where = "save_npz('" + path + "')";
  if (arrays.empty()) throw InvalidArgument(where + ": no arrays to write (pass at least one)");
  std::vector<std::string> preambles;  // one .npy preamble per member; libzip reads them and the data in place
  preambles.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    const std::string& key = arrays[i].first;
    if (key.empty() || key.find('/') != std::string::npos)
      throw InvalidArgument(where + ": array " + std::to_string(i) + " has the key " + quoted(key, 200) +
                            " (a key names a member: non-empty, without '/')");
    for (size_t j = 0; j < i; ++j)
      if (arrays[j].first == key)
        throw InvalidArgument(where + ": the key " + quoted(key, 200) + " is given twice (keys must be unique)");
    preambles.push_back(npy_preamble(where + " array " + quoted(key, 200), arrays[i].second));
  }
  const std::string tmp = path + ".tmp";
  int code = 0;
  zip_t* za = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (!za) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const int err = zip_error_code_system(&e) ? zip_error_code_system(&e) : EIO;
    zip_error_fini(&e);
    save_failed("save_npz", path, tmp, "cannot create", err);
  }
  auto fail = [&](const std::string& what) {
    const std::string msg = std::string(zip_error_strerror(zip_get_error(za)));
    zip_discard(za);
    std::remove(tmp.c_str());
    throw IoError(where + ": " + what + ": libzip: " + msg + " (check that the directory is writable and has space)");
  };
  for (size_t i = 0; i < arrays.size(); ++i) {
    const Tensor& t = arrays[i].second;
    // Stored, like np.savez: the preamble and the tensor's own bytes, copied into the file when the archive closes.
    const zip_buffer_fragment_t parts[2] = {
        {reinterpret_cast<zip_uint8_t*>(preambles[i].data()), preambles[i].size()},
        {static_cast<zip_uint8_t*>(const_cast<void*>(static_cast<const void*>(t.raw()))), t.nbytes()}};
    zip_source_t* src = zip_source_buffer_fragment(za, parts, t.nbytes() == 0 ? 1 : 2, 0);
    if (!src) fail("cannot add " + arrays[i].first + ".npy");
    const zip_int64_t idx = zip_file_add(za, (arrays[i].first + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
    if (idx < 0) {
      zip_source_free(src);
      fail("cannot add " + arrays[i].first + ".npy");
    }
    if (zip_set_file_compression(za, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0) != 0)
      fail("cannot store " + arrays[i].first + ".npy");
  }
  if (zip_close(za) != 0) fail("cannot write '" + tmp + "'");
  errno = 0;
  const int fd = ::open(tmp.c_str(), O_RDONLY);
  const bool synced = fd >= 0 && fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!synced) save_failed("save_npz", path, tmp, "cannot sync", err ? err : EIO);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    save_failed("save_npz", path, tmp, "cannot rename to '" + path + "' from", errno);
}

std::vector<std::pair<std::string, Tensor>> load_npz(const std::string& path) {
  ZipArchive archive(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ZipArchive::Member& m : archive.members()) {
    if (!m.name.ends_with(".npy"))
      throw FormatError(archive.prefix() + "member " + quoted(m.name, 200) +
                        " is not a .npy array (load_npz reads archives written by np.savez, whose members all end "
                        "in .npy)");
    out.emplace_back(key_of(m.name), archive.load(m));
  }
  return out;
}

Tensor load_npz(const std::string& path, const std::string& key) {
  ZipArchive archive(path);
  std::vector<ZipArchive::Member> members = archive.members();
  for (const ZipArchive::Member& m : members)
    if (m.name == key + ".npy" || (key.ends_with(".npy") && m.name == key)) return archive.load(m);
  std::string keys;
  for (const ZipArchive::Member& m : members) keys += (keys.empty() ? "" : ", ") + quoted(key_of(m.name), 200);
  throw InvalidArgument(archive.prefix() + "no array named " + quoted(key, 200) + "; the archive holds " +
                        (keys.empty() ? std::string("no arrays") : keys) + " (use one of these keys)");
}

}  // namespace tk::data
