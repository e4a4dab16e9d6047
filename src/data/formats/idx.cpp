#include "trainkit/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "data/formats/bytes.h"
#include "runtime/settings.h"

namespace tk::data {
namespace {

// Caps what a header may claim: a corrupt or hostile header must not make us allocate without bound.
constexpr uint64_t kMaxDataBytes = uint64_t{4} << 30;
constexpr int kMaxRank = 8;
// Data is read in chunks into a buffer that grows with what actually arrives, so a header that claims more
// than the file holds costs no more memory than the file itself.
constexpr size_t kChunk = size_t{1} << 20;

struct IdxType {
  uint8_t code;
  const char* name;
  size_t size;
  DType dtype;
};
constexpr IdxType kTypes[] = {{0x08, "uint8", 1, DType::u8},    {0x09, "int8", 1, DType::i32},
                              {0x0B, "int16", 2, DType::i32},   {0x0C, "int32", 4, DType::i32},
                              {0x0D, "float32", 4, DType::f32}, {0x0E, "float64", 8, DType::f32}};

// zlib reads plain and gzip files alike; this wrapper counts decompressed bytes so that every error can say
// where in the stream it happened, and turns zlib's error states into trainkit exceptions.
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : path_(path) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      throw IoError(prefix() + "cannot open: " + (errno ? std::strerror(errno) : "out of memory") +
                    " (check the path and its permissions)");
    gzbuffer(file_, 128 * 1024);
  }
  ~IdxReader() { gzclose(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the stream. Throws on read errors and corrupt gzip data.
  size_t read(uint8_t* dst, size_t n) {
    size_t total = 0;
    while (total < n) {
      auto want = static_cast<unsigned>(std::min<size_t>(n - total, kChunk));
      int got = gzread(file_, dst + total, want);
      if (got > 0) total += static_cast<size_t>(got), offset_ += static_cast<uint64_t>(got);
      if (got != static_cast<int>(want)) {
        check_stream();
        break;
      }
    }
    return total;
  }

  uint64_t offset() const { return offset_; }
  std::string prefix() const { return "IDX file '" + path_ + "': "; }
  bool gzipped() const { return gzdirect(file_) == 0; }
  std::string at(uint64_t offset) const {
    return "at byte offset " + std::to_string(offset) + (gzipped() ? " of the decompressed stream" : "");
  }
  [[noreturn]] void fail(const std::string& problem, uint64_t offset, const std::string& detail,
                         const std::string& todo) const {
    throw FormatError(prefix() + problem + " " + at(offset) + ": " + detail + eof_note_ + " (" + todo + ")");
  }

 private:
  // After a short read: returns at a clean end of file, throws for anything else.
  void check_stream() {
    int err = Z_OK;
    const char* raw = gzerror(file_, &err);
    std::string msg = raw ? raw : "";
    // zlib prefixes its message with the path, which our prefix already names.
    if (msg.starts_with(path_ + ": ")) msg.erase(0, path_.size() + 2);
    if (err == Z_OK) return;
    if (err == Z_BUF_ERROR) {  // the gzip stream stops mid-way: report it as truncation, with zlib's words
      eof_note_ = "; the gzip stream stops early (zlib: " + msg + ")";
      return;
    }
    if (err == Z_ERRNO)
      throw IoError(prefix() + "read failed at byte offset " + std::to_string(offset_) + ": " + msg +
                    " (check the file and the disk)");
    if (err == Z_MEM_ERROR) throw OutOfMemoryError(prefix() + "zlib ran out of memory while decompressing");
    // zlib drops the bytes it decompressed in the failing call, so the compressed offset is the precise one.
    throw FormatError(prefix() + "corrupt gzip stream at byte offset " + std::to_string(gzoffset(file_)) +
                      " of the compressed file, after " + std::to_string(offset_) +
                      " decompressed bytes were read: " + msg + " (re-download the file)");
  }

  std::string path_;
  gzFile file_ = nullptr;
  uint64_t offset_ = 0;
  std::string eof_note_;
};

// Big-endian IDX elements -> the tensor's dtype. The caller has checked raw holds numel * type.size bytes.
Tensor decode(const std::vector<uint8_t>& raw, const IdxType& type, Shape shape, const std::string& path) {
  Tensor t(std::move(shape), type.dtype, Device::cpu(), path);  // owner tag: the file it came from
  const uint8_t* p = raw.data();
  auto n = static_cast<size_t>(t.numel());
  int32_t* ints = type.dtype == DType::i32 ? t.data<int32_t>() : nullptr;
  float* floats = type.dtype == DType::f32 ? t.data<float>() : nullptr;
  switch (type.code) {
    case 0x08:
      if (n) std::memcpy(t.raw(), p, n);
      break;
    case 0x09:
      for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int8_t>(p[i]);
      break;
    case 0x0B:
      for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int16_t>(load_be<uint16_t>(p + 2 * i));
      break;
    case 0x0C:
      for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int32_t>(load_be<uint32_t>(p + 4 * i));
      break;
    case 0x0D:
      for (size_t i = 0; i < n; ++i) floats[i] = std::bit_cast<float>(load_be<uint32_t>(p + 4 * i));
      break;
    case 0x0E:
      for (size_t i = 0; i < n; ++i) floats[i] = narrow_to_float(std::bit_cast<double>(load_be<uint64_t>(p + 8 * i)));
      break;
  }
  return t;
}

}  // namespace

Tensor load_idx(const std::string& path) {
  IdxReader in(path);
  uint8_t magic[4] = {};
  size_t got = in.read(magic, 4);
  if ((got >= 1 && magic[0] != 0) || (got >= 2 && magic[1] != 0)) {
    in.fail("bad magic", 0,
            "found bytes " + hex_bytes(magic, got) +
                ", expected 00 00 <type code> <rank>; this is neither an IDX "
                "file nor a gzipped IDX file",
            "check the path, or re-download the file");
  }
  if (got == 0)
    in.fail("truncated header", 0, in.gzipped() ? "the decompressed stream is empty" : "the file is empty",
            "check the path, or re-download the file");
  if (got < 4)
    in.fail("truncated header", got, "expected a 4-byte magic number, got " + std::to_string(got) + " bytes",
            "re-download the file");

  const IdxType* type = nullptr;
  for (const IdxType& t : kTypes)
    if (t.code == magic[2]) type = &t;
  if (!type)
    in.fail("unknown type code", 2,
            "0x" + hex_bytes(magic + 2, 1) +
                " (expected 0x08 uint8, 0x09 int8, 0x0B int16, "
                "0x0C int32, 0x0D float32 or 0x0E float64)",
            "the file is not IDX or is corrupted; re-download it");
  int rank = magic[3];
  if (rank == 0 || rank > kMaxRank)
    in.fail("bad rank", 3, "rank " + std::to_string(rank) + " (expected 1 to " + std::to_string(kMaxRank) + ")",
            "the file is not IDX or is corrupted; re-download it");

  uint8_t dim_bytes[4 * kMaxRank];
  size_t header = 4 + 4 * static_cast<size_t>(rank);
  got = in.read(dim_bytes, header - 4);
  if (got < header - 4)
    in.fail("truncated header", 4 + got,
            "expected " + std::to_string(header) + " header bytes for " + std::to_string(rank) + " dimensions, got " +
                std::to_string(4 + got),
            "re-download the file");
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(load_be<uint32_t>(dim_bytes + 4 * i));
  Shape shape(dims);
  // Checked dimension by dimension so the message can point at the one that breaks the limit.
  uint64_t bytes = type->size;
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dims[static_cast<size_t>(i)]), &bytes) ||
        bytes > kMaxDataBytes)
      in.fail("dimension too large", 4 + 4 * static_cast<uint64_t>(i),
              "dimension " + std::to_string(i) + " is " + std::to_string(dims[static_cast<size_t>(i)]) + ", so shape " +
                  shape.to_string() + " of " + type->name + " would need more than the 4 GiB limit",
              "the file is corrupted; re-download it");
  }

  std::vector<uint8_t> raw;
  read_growing(raw, bytes, kChunk, [&](uint8_t* dst, size_t want) { return in.read(dst, want); });
  if (raw.size() < bytes)
    in.fail("truncated", in.offset(),
            "expected " + std::to_string(bytes) + " data bytes for shape " + shape.to_string() + " of " + type->name +
                ", got " + std::to_string(raw.size()),
            "re-download the file");
  // Reading one more byte also makes zlib verify the gzip trailer (CRC and length).
  uint8_t extra = 0;
  if (in.read(&extra, 1) != 0)
    in.fail("trailing bytes", header + bytes,
            "the data for shape " + shape.to_string() + " of " + type->name + " ends here but the file goes on",
            "the header does not match the data; re-download the file");
  return decode(raw, *type, std::move(shape), path);
}

std::pair<Tensor, Tensor> load_idx_pair(const std::string& images, const std::string& labels) {
  Tensor x = load_idx(images);
  Tensor y = load_idx(labels);
  if (x.dim(0) != y.dim(0))
    throw InvalidArgument("load_idx_pair: images '" + images + "' hold " + std::to_string(x.dim(0)) +
                          " samples but labels '" + labels + "' hold " + std::to_string(y.dim(0)) +
                          " (pass the labels file that belongs to these images)");
  return {std::move(x), std::move(y)};
}

std::string default_fashion_mnist_dir() {
  return runtime::setting_text(runtime::Setting::fashion_mnist_dir)
      .value_or(runtime::setting_info(runtime::Setting::fashion_mnist_dir).fallback);
}

FashionMnist load_fashion_mnist(const std::string& dir, bool scale_to_float) {
  namespace fs = std::filesystem;
  auto find = [&](const std::string& name) {
    for (const std::string& candidate : {name + ".gz", name}) {
      std::error_code ec;
      if (fs::is_regular_file(fs::path(dir) / candidate, ec)) return (fs::path(dir) / candidate).string();
    }
    throw IoError("Fashion-MNIST directory '" + dir + "': neither '" + name + ".gz' nor '" + name +
                  "' exists (install Debian's dataset-fashion-mnist package or pass the directory)");
  };
  // Resolve all four first so that a missing one is reported before any time goes into decompressing the others.
  std::string paths[4] = {find("train-images-idx3-ubyte"), find("train-labels-idx1-ubyte"),
                          find("t10k-images-idx3-ubyte"), find("t10k-labels-idx1-ubyte")};
  auto load = [&](const std::string& images, const std::string& labels, Tensor& x, Tensor& y) {
    auto [raw_x, raw_y] = load_idx_pair(images, labels);
    if (raw_x.dtype() != DType::u8 || raw_x.shape().rank() != 3 || raw_x.dim(1) != 28 || raw_x.dim(2) != 28)
      throw FormatError("IDX file '" + images + "': the header (from byte offset 0) declares " +
                        std::string(dtype_name(raw_x.dtype())) + " " + raw_x.shape().to_string() +
                        ", but Fashion-MNIST images are uint8 (N, 28, 28) (pass the Fashion-MNIST directory)");
    if (raw_y.dtype() != DType::u8 || raw_y.shape().rank() != 1)
      throw FormatError("IDX file '" + labels + "': the header (from byte offset 0) declares " +
                        std::string(dtype_name(raw_y.dtype())) + " " + raw_y.shape().to_string() +
                        ", but Fashion-MNIST labels are uint8 (N,) (pass the Fashion-MNIST directory)");
    const uint8_t* label = raw_y.data<uint8_t>();
    for (int64_t i = 0; i < raw_y.numel(); ++i)
      if (label[i] >= 10)
        throw FormatError("IDX file '" + labels + "': label " + std::to_string(label[i]) + " at byte offset " +
                          std::to_string(8 + i) + (labels.ends_with(".gz") ? " of the decompressed stream" : "") +
                          " is not a class 0..9 (re-download the file)");
    if (!scale_to_float) {
      x = std::move(raw_x);
      y = std::move(raw_y);
      return;
    }
    x = Tensor(raw_x.shape(), DType::f32, Device::cpu(), images + " (float32 / 255)");
    const uint8_t* src = raw_x.data<uint8_t>();
    float* dst = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
    y = std::move(raw_y);
  };
  FashionMnist d;
  load(paths[0], paths[1], d.x_train, d.y_train);
  load(paths[2], paths[3], d.x_test, d.y_test);
  return d;
}

}  // namespace tk::data
