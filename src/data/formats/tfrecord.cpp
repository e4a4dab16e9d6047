#include "trainkit/data/tfrecord.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "data/formats/bytes.h"
#include "data/formats/crc32c.h"
#include "data/formats/protobuf_wire.h"

namespace tk::data {
namespace {

constexpr size_t kHeaderBytes = 12;  // uint64 length + uint32 masked CRC of it
constexpr size_t kFooterBytes = 4;   // uint32 masked CRC of the data
// Compressed records grow in steps of this size as bytes arrive, so a length that the stream cannot back
// costs at most one step of memory beyond the bytes actually present.
constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kIoBuffer = size_t{64} << 10;  // stdio and zlib buffers; the kernel reads ahead

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const char* compression_label(Compression c) {
  switch (c) {
    case Compression::gzip:
      return "GZIP";
    case Compression::zlib:
      return "ZLIB";
    case Compression::none:
      break;
  }
  return "";
}

// zlib window bits: 15 for a zlib stream, +16 for a gzip wrapper (what TF's ZlibCompressionOptions use).
int window_bits(Compression c) { return c == Compression::gzip ? MAX_WBITS + 16 : MAX_WBITS; }

// Names from a file go into one-line messages: control bytes (and backslashes, so that names differing in
// them stay distinct) escaped, length capped at 64 bytes.
std::string printable(std::string_view s) { return escaped(s, 64, Escape::names); }

}  // namespace

Compression compression_from_name(std::string_view name) {
  if (name.empty() || name == "NONE") return Compression::none;
  if (name == "GZIP") return Compression::gzip;
  if (name == "ZLIB") return Compression::zlib;
  throw InvalidArgument("unknown TFRecord compression type '" + std::string(name) +
                        "' (use \"\" for none, \"GZIP\" or \"ZLIB\", as in tf.io.TFRecordOptions)");
}

// ---------------------------------------------------------------------------------------------------------
// Reader

struct TFRecordReader::Impl {
  std::string path;
  bool check_crc = true;
  Compression compression = Compression::none;
  std::FILE* file = nullptr;
  bool sized = false;      // an uncompressed regular file: its size bounds every record length
  uint64_t file_size = 0;  // on disk, from fstat
  uint64_t pos = 0;        // bytes consumed from the (decompressed) stream
  int64_t index = -1;      // of the record last returned
  uint64_t record_offset = 0;
  // Compressed files only.
  z_stream z{};
  bool z_ready = false;
  bool member_ended = false;  // inflate finished a gzip member / zlib stream; another may follow
  bool file_eof = false;
  uint64_t compressed_fed = 0;  // compressed bytes handed to zlib so far
  std::vector<uint8_t> in;

  ~Impl() {
    if (z_ready) inflateEnd(&z);
    if (file) std::fclose(file);
  }

  bool compressed() const { return compression != Compression::none; }
  std::string file_label() const {
    return "TFRecord file '" + path + "'" +
           (compressed() ? std::string(" (") + compression_label(compression) + ")" : "");
  }
  std::string at(int64_t record, uint64_t offset) const {
    return file_label() + ": record " + std::to_string(record) + " at byte offset " + std::to_string(offset) +
           (compressed() ? " of the decompressed stream" : "");
  }
  [[noreturn]] void fail(int64_t record, uint64_t offset, const std::string& problem, const std::string& todo) const {
    throw FormatError(at(record, offset) + ": " + problem + " (" + todo + ")");
  }
  uint64_t compressed_offset() const { return compressed_fed - z.avail_in; }

  void open() {
    file = open_file(path, file_label() + ": ");
    struct stat st {};
    if (fstat(fileno(file), &st) != 0)
      throw IoError(file_label() + ": cannot stat: " + std::strerror(errno) + " (check the file and the disk)");
    if (S_ISDIR(st.st_mode))
      throw IoError(file_label() + ": cannot read: it is a directory (pass a .tfrecord file; list_files finds them)");
    // Pipes and devices have no size: their records are read in chunks, as from a compressed stream.
    sized = S_ISREG(st.st_mode) && !compressed();
    file_size = static_cast<uint64_t>(st.st_size);
    std::setvbuf(file, nullptr, _IOFBF, kIoBuffer);
    if (compressed()) {
      in.resize(kIoBuffer);
      if (inflateInit2(&z, window_bits(compression)) != Z_OK)
        throw OutOfMemoryError(file_label() + ": zlib could not allocate its inflate state");
      z_ready = true;
    }
  }

  size_t fread_checked(uint8_t* dst, size_t n) {
    size_t got = std::fread(dst, 1, n, file);
    if (got < n && std::ferror(file))
      throw IoError(file_label() + ": read failed at byte offset " +
                    std::to_string(compressed() ? compressed_fed : pos) + " of the file: " + std::strerror(errno) +
                    " (check the file and the disk)");
    return got;
  }

  // Up to n bytes of the (decompressed) stream; fewer only at its end.
  size_t read(uint8_t* dst, size_t n) {
    if (!compressed()) {
      size_t got = fread_checked(dst, n);
      pos += got;
      return got;
    }
    size_t total = 0;
    while (total < n) {
      auto want = static_cast<uInt>(std::min<size_t>(n - total, kChunk));
      z.next_out = dst + total;
      z.avail_out = want;
      while (z.avail_out > 0) {
        if (z.avail_in == 0 && !file_eof) {
          size_t got = fread_checked(in.data(), in.size());
          if (got == 0) file_eof = true;
          z.next_in = in.data();
          z.avail_in = static_cast<uInt>(got);
          compressed_fed += got;
        }
        if (z.avail_in == 0) break;  // end of the compressed file
        if (member_ended) {          // concatenated gzip members (or zlib streams): start the next one
          inflateReset(&z);
          member_ended = false;
        }
        int ret = inflate(&z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
          member_ended = true;
        } else if (ret != Z_OK) {
          inflate_failed(ret, pos + total + (want - z.avail_out));
        }
      }
      size_t got = want - z.avail_out;
      total += got;
      if (got < want) break;
    }
    pos += total;
    return total;
  }

  [[noreturn]] void inflate_failed(int ret, uint64_t decompressed) const {
    if (ret == Z_MEM_ERROR) throw OutOfMemoryError(file_label() + ": zlib ran out of memory while decompressing");
    std::string msg = z.msg ? z.msg : ret == Z_NEED_DICT ? "needs a preset dictionary" : "no progress possible";
    throw FormatError(file_label() + ": corrupt compressed stream at byte offset " +
                      std::to_string(compressed_offset()) + " of the file, after " + std::to_string(decompressed) +
                      " decompressed bytes: zlib: " + msg +
                      " (check that the file was written with compression_type \"" + compression_label(compression) +
                      "\"; otherwise it is damaged: re-create it)");
  }

  // At a record boundary with no more bytes: a compressed stream must also have ended properly.
  void check_clean_end() const {
    if (compressed() && !member_ended && compressed_fed > 0)
      throw FormatError(file_label() + ": the compressed stream stops early, at byte offset " +
                        std::to_string(compressed_fed) + " of the file after " + std::to_string(pos) +
                        " decompressed bytes (the file was cut short; re-create it)");
  }

  // Bytes left in an uncompressed file after pos; re-reads the size in case the file grew since open.
  uint64_t remaining() {
    if (!sized) return std::numeric_limits<uint64_t>::max();
    struct stat st {};
    if (fstat(fileno(file), &st) == 0) file_size = std::max(file_size, static_cast<uint64_t>(st.st_size));
    return pos <= file_size ? file_size - pos : 0;
  }

  bool next(std::string& record) {
    const uint64_t start = pos;
    const int64_t idx = index + 1;
    uint8_t header[kHeaderBytes];
    size_t got = read(header, kHeaderBytes);
    if (got == 0) {
      check_clean_end();
      return false;
    }
    if (got < kHeaderBytes)
      fail(idx, start,
           "truncated record header: the file ends " + std::to_string(got) +
               " bytes into the 12-byte header (8-byte length, 4-byte masked CRC32C)",
           "the file was cut short, e.g. by an interrupted write; re-create it");
    const uint64_t length = load_le<uint64_t>(header);
    if (check_crc) {
      uint32_t stored = load_le<uint32_t>(header + 8), actual = masked_crc32c(header, 8);
      if (stored != actual) {
        std::string hint = "the file is corrupt or not a TFRecord file; check_crc=false reads it anyway";
        if (start == 0 && !compressed() && header[0] == 0x1F && header[1] == 0x8B)
          hint = "the file starts like a gzip file: open it with Compression::gzip";
        else if (start == 0 && !compressed() && header[0] == 0x78)
          hint = "the file may be ZLIB-compressed: open it with Compression::zlib";
        fail(idx, start,
             "bad length CRC: the masked CRC32C of the length bytes is " + hex32(actual) + " but the file stores " +
                 hex32(stored) + " at byte offset " + std::to_string(start + 8),
             hint);
      }
    }
    const uint64_t data_at = start + kHeaderBytes;
    // Fails: the file ends `present` bytes into the 4-byte data CRC.
    auto truncated_footer = [&](uint64_t present) {
      fail(idx, start,
           "truncated record: the file ends " + std::to_string(present) +
               " bytes into the 4-byte data CRC at byte offset " + std::to_string(data_at + length),
           "the file was cut short, e.g. by an interrupted write; re-create it");
    };
    // Never allocate for bytes that are not there: an uncompressed file says how many remain. (Streams
    // without a size grow the record as bytes arrive, below.)
    const uint64_t left = remaining();
    if (sized && (length > left || left - length < kFooterBytes)) {
      if (length > left)
        fail(idx, start,
             "record length " + std::to_string(length) + " (in the header) exceeds the " + std::to_string(left) +
                 " bytes left in the file after the header",
             check_crc ? "the length's CRC is valid, so the file was cut short; re-create it"
                       : "the file is truncated or corrupt; re-create it");
      truncated_footer(left - length);
    }
    if (sized) {
      record.resize(static_cast<size_t>(length));
      got = length ? read(reinterpret_cast<uint8_t*>(record.data()), record.size()) : 0;
      if (got < length)  // the file shrank while we read it
        fail(idx, start,
             "truncated record: " + std::to_string(got) + " of " + std::to_string(length) +
                 " data bytes present from byte offset " + std::to_string(data_at),
             "the file was cut short; re-create it");
    } else {
      record.clear();
      read_growing(record, length, kChunk, [&](uint8_t* dst, size_t want) { return read(dst, want); });
      if (record.size() < length)
        fail(idx, start,
             "truncated record: the header promises " + std::to_string(length) + " data bytes from byte offset " +
                 std::to_string(data_at) + " but the stream ends after " + std::to_string(record.size()),
             "the file was cut short, or the length is corrupt; re-create it");
    }
    uint8_t footer[kFooterBytes];
    got = read(footer, kFooterBytes);
    if (got < kFooterBytes) truncated_footer(got);
    if (check_crc) {
      uint32_t stored = load_le<uint32_t>(footer), actual = masked_crc32c(record.data(), record.size());
      if (stored != actual)
        fail(idx, start,
             "bad data CRC: the masked CRC32C of the " + std::to_string(length) + " data bytes at byte offset " +
                 std::to_string(data_at) + " is " + hex32(actual) + " but the file stores " + hex32(stored) +
                 " at byte offset " + std::to_string(data_at + length),
             "the record is corrupt; re-create the file, or read it with check_crc=false");
    }
    index = idx;
    record_offset = start;
    return true;
  }
};

TFRecordReader::TFRecordReader(std::string path, bool check_crc, Compression compression)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->check_crc = check_crc;
  impl_->compression = compression;
  impl_->open();
}
TFRecordReader::~TFRecordReader() = default;
TFRecordReader::TFRecordReader(TFRecordReader&&) noexcept = default;
TFRecordReader& TFRecordReader::operator=(TFRecordReader&&) noexcept = default;

bool TFRecordReader::next(std::string& record) {
  if (!impl_) throw InvalidArgument("TFRecordReader::next on a moved-from reader");
  return impl_->next(record);
}
int64_t TFRecordReader::record_index() const { return impl_ ? impl_->index : -1; }
uint64_t TFRecordReader::offset() const { return impl_ ? impl_->record_offset : 0; }
const std::string& TFRecordReader::path() const {
  static const std::string empty;
  return impl_ ? impl_->path : empty;
}
std::string TFRecordReader::where() const {
  if (!impl_) return "TFRecord reader (moved from)";
  if (impl_->index < 0) return impl_->file_label() + ": before the first record";
  return impl_->at(impl_->index, impl_->record_offset);
}

// ---------------------------------------------------------------------------------------------------------
// Writer

struct TFRecordWriter::Impl {
  std::string path, tmp;
  Compression compression = Compression::none;
  std::FILE* file = nullptr;
  z_stream z{};
  bool z_ready = false;
  bool failed = false;
  std::vector<uint8_t> out;

  ~Impl() {
    if (z_ready) deflateEnd(&z);
    if (file) {  // never closed: discard
      std::fclose(file);
      std::remove(tmp.c_str());
    }
  }

  [[noreturn]] void io_fail(const std::string& what) {
    failed = true;
    throw IoError("TFRecord writer for '" + path + "': " + what + ": " + std::strerror(errno) +
                  " (check the directory, its permissions and the free disk space)");
  }

  void open() {
    tmp = path + ".tmp";
    errno = 0;
    file = std::fopen(tmp.c_str(), "wb");
    if (!file) io_fail("cannot create '" + tmp + "'");
    std::setvbuf(file, nullptr, _IOFBF, kIoBuffer);
    if (compression != Compression::none) {
      out.resize(kIoBuffer);
      if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits(compression), 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw OutOfMemoryError("TFRecord writer for '" + path + "': zlib could not allocate its deflate state");
      z_ready = true;
    }
  }

  void put_file(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, file) != n) io_fail("cannot write '" + tmp + "'");
  }

  void deflate_all(const uint8_t* p, size_t n, int flush) {
    do {
      auto step = static_cast<uInt>(std::min<size_t>(n, kChunk));
      z.next_in = const_cast<uint8_t*>(p);  // zlib's API is not const-correct; it does not write here
      z.avail_in = step;
      p += step;
      n -= step;
      int mode = n == 0 ? flush : Z_NO_FLUSH;
      int ret;
      do {
        z.next_out = out.data();
        z.avail_out = static_cast<uInt>(out.size());
        ret = deflate(&z, mode);
        if (ret == Z_STREAM_ERROR) {
          failed = true;
          throw IoError("TFRecord writer for '" + path + "': zlib deflate failed (internal error)");
        }
        put_file(out.data(), out.size() - z.avail_out);
      } while (z.avail_out == 0 || (mode == Z_FINISH && ret != Z_STREAM_END));
    } while (n > 0);
  }

  void put(const void* p, size_t n) {
    if (compression == Compression::none)
      put_file(p, n);
    else
      deflate_all(static_cast<const uint8_t*>(p), n, Z_NO_FLUSH);
  }

  void write(std::string_view record) {
    if (!file) throw InvalidArgument("TFRecordWriter::write on '" + path + "' after close()");
    if (failed) throw IoError("TFRecord writer for '" + path + "': an earlier write failed (nothing more is written)");
    uint8_t header[kHeaderBytes];
    store_le<uint64_t>(header, record.size());
    store_le<uint32_t>(header + 8, masked_crc32c(header, 8));
    uint8_t footer[kFooterBytes];
    store_le<uint32_t>(footer, masked_crc32c(record.data(), record.size()));
    put(header, sizeof header);
    put(record.data(), record.size());
    put(footer, sizeof footer);
  }

  void close() {
    if (!file) return;
    if (failed) throw IoError("TFRecord writer for '" + path + "': an earlier write failed, so nothing was saved");
    try {
      if (z_ready) deflate_all(nullptr, 0, Z_FINISH);
      if (std::fflush(file) != 0) io_fail("cannot write '" + tmp + "'");
      // Data on disk before the rename makes it visible: a crash leaves the old file or the whole new one.
      if (fsync(fileno(file)) != 0 && errno != EINVAL) io_fail("cannot sync '" + tmp + "'");
    } catch (...) {
      std::fclose(file);
      file = nullptr;
      std::remove(tmp.c_str());
      throw;
    }
    int rc = std::fclose(file);
    file = nullptr;
    if (rc != 0) {
      std::remove(tmp.c_str());
      io_fail("cannot close '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      std::remove(tmp.c_str());
      errno = err;
      io_fail("cannot rename '" + tmp + "' to '" + path + "'");
    }
  }
};

TFRecordWriter::TFRecordWriter(std::string path, Compression compression) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->compression = compression;
  impl_->open();
}
TFRecordWriter::~TFRecordWriter() = default;
TFRecordWriter::TFRecordWriter(TFRecordWriter&&) noexcept = default;
TFRecordWriter& TFRecordWriter::operator=(TFRecordWriter&&) noexcept = default;

void TFRecordWriter::write(std::string_view record) {
  if (!impl_) throw InvalidArgument("TFRecordWriter::write on a moved-from writer");
  impl_->write(record);
}
void TFRecordWriter::close() {
  if (impl_) impl_->close();
}

// ---------------------------------------------------------------------------------------------------------
// tf.train.Example (tensorflow/core/example/{example,feature}.proto):
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }     // on the wire: repeated entry {key = 1; value = 2}
//   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
//   Int64List { repeated int64 value = 1 [packed]; }

Feature bytes_feature(std::vector<std::string> values) {
  Feature f;
  f.kind = Feature::Kind::bytes;
  f.bytes = std::move(values);
  return f;
}
Feature float_feature(std::vector<float> values) {
  Feature f;
  f.kind = Feature::Kind::floats;
  f.floats = std::move(values);
  return f;
}
Feature int64_feature(std::vector<int64_t> values) {
  Feature f;
  f.kind = Feature::Kind::int64s;
  f.int64s = std::move(values);
  return f;
}

std::string_view kind_name(Feature::Kind kind) {
  static constexpr std::string_view kNames[] = {"empty Feature", "bytes_list", "float_list", "int64_list"};
  static_assert(std::size(kNames) == static_cast<size_t>(Feature::Kind::int64s) + 1, "one name per Kind");
  return kNames[static_cast<size_t>(kind)];  // Kind's order: none, bytes, floats, int64s
}

namespace {

using wire::WireType;

void parse_list(wire::Reader r, Feature& f) {
  uint32_t field = 0;
  WireType type{};
  while (r.next(field, type)) {
    if (field != 1) {
      r.skip(field, type);
    } else if (f.kind == Feature::Kind::bytes && type == WireType::len) {
      f.bytes.emplace_back(r.len());
    } else if (f.kind == Feature::Kind::floats && type == WireType::len) {  // packed
      std::string_view packed = r.len();
      if (packed.size() % 4 != 0)
        r.fail("packed float_list of " + std::to_string(packed.size()) + " bytes (not a multiple of 4)",
               r.offset() - packed.size());
      f.floats.reserve(f.floats.size() + packed.size() / 4);
      for (size_t i = 0; i < packed.size(); i += 4)
        f.floats.push_back(std::bit_cast<float>(load_le<uint32_t>(packed.data() + i)));
    } else if (f.kind == Feature::Kind::floats && type == WireType::fixed32) {
      f.floats.push_back(std::bit_cast<float>(r.fixed32()));
    } else if (f.kind == Feature::Kind::int64s && type == WireType::len) {  // packed
      wire::Reader packed = r.sub(r.len(), "packed int64_list");
      while (!packed.at_end()) f.int64s.push_back(static_cast<int64_t>(packed.varint()));
    } else if (f.kind == Feature::Kind::int64s && type == WireType::varint) {
      f.int64s.push_back(static_cast<int64_t>(r.varint()));
    } else {
      r.skip(field, type);  // a wire type this field cannot have: protobuf keeps it as an unknown field
    }
  }
}

// Merges into f, as protobuf merges repeated occurrences of a message; a different oneof member replaces it.
void parse_feature(wire::Reader r, Feature& f) {
  static constexpr Feature::Kind kKinds[] = {Feature::Kind::bytes, Feature::Kind::floats, Feature::Kind::int64s};
  static constexpr const char* kLists[] = {"BytesList", "FloatList", "Int64List"};
  uint32_t field = 0;
  WireType type{};
  while (r.next(field, type)) {
    if (field < 1 || field > 3 || type != WireType::len) {
      r.skip(field, type);
      continue;
    }
    if (f.kind != kKinds[field - 1]) {
      f = Feature{};
      f.kind = kKinds[field - 1];
    }
    parse_list(r.sub(r.len(), kLists[field - 1]), f);
  }
}

void parse_features(wire::Reader r, Example& out) {
  uint32_t field = 0;
  WireType type{};
  while (r.next(field, type)) {
    if (field != 1 || type != WireType::len) {
      r.skip(field, type);
      continue;
    }
    wire::Reader entry = r.sub(r.len(), "Features map entry");
    std::string key;
    Feature value;
    uint32_t f = 0;
    WireType t{};
    while (entry.next(f, t)) {
      if (f == 1 && t == WireType::len)
        key = entry.len();
      else if (f == 2 && t == WireType::len)
        parse_feature(entry.sub(entry.len(), "Feature"), value);
      else
        entry.skip(f, t);
    }
    out.insert_or_assign(std::move(key), std::move(value));  // a later entry for a key replaces it
  }
}

std::string serialize_feature(const Feature& f) {
  std::string list, packed, out;
  switch (f.kind) {
    case Feature::Kind::bytes:
      for (const std::string& v : f.bytes) wire::put_len(list, 1, v);
      break;
    case Feature::Kind::floats:
      packed.reserve(4 * f.floats.size());
      for (float v : f.floats) wire::put_fixed32(packed, std::bit_cast<uint32_t>(v));
      break;
    case Feature::Kind::int64s:
      for (int64_t v : f.int64s) wire::put_varint(packed, static_cast<uint64_t>(v));
      break;
    case Feature::Kind::none:
    default:
      return out;
  }
  if (!packed.empty()) wire::put_len(list, 1, packed);
  // The oneof's field number is the kind's value: bytes_list 1, float_list 2, int64_list 3.
  wire::put_len(out, static_cast<uint32_t>(f.kind), list);
  return out;
}

}  // namespace

Example parse_example(std::string_view record) {
  Example out;
  wire::Reader r(record, 0, "Example");
  uint32_t field = 0;
  WireType type{};
  while (r.next(field, type)) {
    if (field == 1 && type == WireType::len)
      parse_features(r.sub(r.len(), "Features"), out);
    else
      r.skip(field, type);
  }
  return out;
}

std::string serialize_example(const Example& example) {
  std::string features;
  for (const auto& [name, feature] : example) {
    std::string entry;
    wire::put_len(entry, 1, name);
    wire::put_len(entry, 2, serialize_feature(feature));
    wire::put_len(features, 1, entry);
  }
  std::string out;
  wire::put_len(out, 1, features);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Examples as tensors

namespace {

std::string a_kind(Feature::Kind k) { return (k == Feature::Kind::int64s ? "an " : "a ") + std::string(kind_name(k)); }

std::string spec_label(const FeatureSpec& s) { return std::string(dtype_name(s.dtype)) + " " + s.shape.to_string(); }

// What a dtype is read from, for messages.
std::string sources_of(DType t) {
  switch (t) {
    case DType::f32:
      return "a float_list, or one bytes value of raw float32";
    case DType::i64:
    case DType::i32:
    case DType::u8:
    case DType::boolean:
      return "an int64_list, or one bytes value of raw " + std::string(dtype_name(t));
    default:
      return "one bytes value of raw " + std::string(dtype_name(t)) + " (or read float32 and convert)";
  }
}

// `bad(i)` is the message for value i out of [lo, hi].
template <typename T, typename Bad>
void store_ints(const std::vector<int64_t>& v, Tensor& t, int64_t lo, int64_t hi, const Bad& bad) {
  T* dst = static_cast<T*>(t.raw());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < lo || v[i] > hi) throw FormatError(bad(i));
    dst[i] = static_cast<T>(v[i]);
  }
}

class TFRecordExampleReader : public ElementReader {
 public:
  TFRecordExampleReader(const std::string& path, std::vector<FeatureSpec> specs, Compression compression)
      : specs_(std::move(specs)) {
    if (specs_.empty())
      throw InvalidArgument("open_tfrecord('" + path + "'): no FeatureSpec given (name at least one feature to read)");
    for (FeatureSpec& s : specs_) {
      std::string what = "open_tfrecord('" + path + "'): FeatureSpec '" + s.name + "'";
      if (!s.shape.fully_known())
        throw InvalidArgument(what + " has shape " + s.shape.to_string() +
                              "; FixedLenFeature shapes must be fully known (read a variable-length list as bytes)");
      for (int64_t d : s.shape.dims())
        if (d < 0) throw InvalidArgument(what + " has a negative dimension in shape " + s.shape.to_string());
      if (s.default_value) {
        const Tensor& d = *s.default_value;
        if (!d.defined() || d.dtype() != s.dtype || (d.shape() != s.shape && d.numel() != 1))
          throw InvalidArgument(what + ": default_value is " +
                                (d.defined() ? std::string(dtype_name(d.dtype())) + " " + d.shape().to_string()
                                             : std::string("an undefined tensor")) +
                                " but the feature is " + spec_label(s) +
                                " (give a tensor of that dtype and shape, or of one element)");
        if (d.shape() != s.shape) {  // one element: broadcast once here, cloned per record
          Tensor full(s.shape, s.dtype);
          size_t size = dtype_size(s.dtype);
          for (int64_t i = 0; i < full.numel(); ++i)
            std::memcpy(static_cast<uint8_t*>(full.raw()) + static_cast<size_t>(i) * size, d.raw(), size);
          s.default_value = full;
        }
      }
    }
    reader_ = std::make_unique<TFRecordReader>(path, true, compression);
  }

  bool next(Element& out) override {
    if (!reader_->next(record_)) return false;
    Example example;
    try {
      example = parse_example(record_);
    } catch (const FormatError& e) {
      throw FormatError(reader_->where() + ": " + e.what() +
                        " (the record is not a serialized tf.train.Example, or it is corrupt)");
    }
    out.resize(specs_.size());
    for (size_t i = 0; i < specs_.size(); ++i) out[i] = convert(specs_[i], example);
    return true;
  }

  std::string position() const override {
    if (reader_->record_index() < 0) return "'" + reader_->path() + "' before the first record";
    return "'" + reader_->path() + "' record " + std::to_string(reader_->record_index()) + " (byte offset " +
           std::to_string(reader_->offset()) + ")";
  }

 private:
  [[noreturn]] void fail(const FeatureSpec& s, const std::string& problem, const std::string& todo) const {
    throw FormatError(reader_->where() + ": feature '" + printable(s.name) + "' " + problem + " (" + todo + ")");
  }

  Tensor convert(const FeatureSpec& s, const Example& example) const {
    auto it = example.find(s.name);
    // An empty Feature (no list set) counts as missing, as in tf.io.parse_example.
    if (it == example.end() || it->second.kind == Feature::Kind::none) {
      if (s.default_value) return s.default_value->clone();
      std::string present;
      size_t listed = 0;
      for (const auto& [name, f] : example) {
        if (listed++ == 8) {
          present += ", ...";
          break;
        }
        present += (present.empty() ? "" : ", ") + printable(name);
      }
      fail(s,
           std::string(it == example.end() ? "is missing" : "is an empty Feature (no list set)") + "; the record has " +
               (present.empty() ? std::string("no features") : "features: " + present),
           "give the FeatureSpec a default_value, or check the feature name");
    }
    const Feature& f = it->second;
    const int64_t n = s.shape.numel();
    const size_t size = dtype_size(s.dtype);
    auto count_mismatch = [&](size_t count) {
      fail(s,
           "is " + a_kind(f.kind) + " of " + std::to_string(count) + " values, but " + spec_label(s) + " needs " +
               std::to_string(n),
           "fix the FeatureSpec's shape to match the data");
    };
    Tensor t(s.shape, s.dtype);
    switch (f.kind) {
      case Feature::Kind::none:  // handled above
      case Feature::Kind::bytes: {
        if (f.bytes.size() != 1)
          fail(s,
               "is a bytes_list of " + std::to_string(f.bytes.size()) + " values, but " + spec_label(s) +
                   " is decoded from exactly one value of " + std::to_string(static_cast<uint64_t>(n) * size) +
                   " raw bytes (like tf.io.decode_raw)",
               "store one bytes value per record, or read another feature");
        const std::string& raw = f.bytes[0];
        if (raw.size() != static_cast<uint64_t>(n) * size)
          fail(s,
               "holds " + std::to_string(raw.size()) + " raw bytes, but " + spec_label(s) + " needs " +
                   std::to_string(static_cast<uint64_t>(n) * size) + " (" + std::to_string(n) + " x " +
                   std::to_string(size) + ")",
               "fix the FeatureSpec's dtype or shape to match the data");
        if (s.dtype == DType::boolean)
          for (size_t i = 0; i < raw.size(); ++i)
            if (raw[i] != 0 && raw[i] != 1)
              fail(s,
                   "raw byte " + std::to_string(i) + " is " + std::to_string(static_cast<uint8_t>(raw[i])) +
                       ", not a bool (0 or 1)",
                   "store bools as bytes 0 and 1");
        if (!raw.empty()) std::memcpy(t.raw(), raw.data(), raw.size());
        if constexpr (std::endian::native == std::endian::big) {  // raw data is little-endian, as TF writes it
          auto* p = static_cast<uint8_t*>(t.raw());
          for (size_t i = 0; i + size <= raw.size(); i += size) std::reverse(p + i, p + i + size);
        }
        return t;
      }
      case Feature::Kind::floats:
        if (s.dtype != DType::f32)
          fail(s, "is a float_list, but " + spec_label(s) + " is read from " + sources_of(s.dtype),
               "use dtype float32 for this feature, then Tensor::to to convert");
        if (f.floats.size() != static_cast<uint64_t>(n)) count_mismatch(f.floats.size());
        if (n) std::memcpy(t.raw(), f.floats.data(), f.floats.size() * sizeof(float));
        return t;
      case Feature::Kind::int64s: {
        if (s.dtype != DType::i64 && s.dtype != DType::i32 && s.dtype != DType::u8 && s.dtype != DType::boolean)
          fail(s, "is an int64_list, but " + spec_label(s) + " is read from " + sources_of(s.dtype),
               "use dtype int64, int32, uint8 or bool for this feature, then Tensor::to to convert");
        if (f.int64s.size() != static_cast<uint64_t>(n)) count_mismatch(f.int64s.size());
        auto bad = [&](size_t i) {
          return reader_->where() + ": feature '" + printable(s.name) + "' value " + std::to_string(f.int64s[i]) +
                 " at index " + std::to_string(i) + " does not fit in " + std::string(dtype_name(s.dtype)) +
                 " (use a wider dtype, such as int64)";
        };
        switch (s.dtype) {
          case DType::i64:
            if (n) std::memcpy(t.raw(), f.int64s.data(), f.int64s.size() * sizeof(int64_t));
            break;
          case DType::i32:
            store_ints<int32_t>(f.int64s, t, INT32_MIN, INT32_MAX, bad);
            break;
          case DType::u8:
            store_ints<uint8_t>(f.int64s, t, 0, 255, bad);
            break;
          default:
            store_ints<bool>(f.int64s, t, 0, 1, bad);
            break;
        }
        return t;
      }
    }
    return t;
  }

  std::vector<FeatureSpec> specs_;
  std::unique_ptr<TFRecordReader> reader_;
  std::string record_;
};

}  // namespace

std::unique_ptr<ElementReader> open_tfrecord(const std::string& path, std::vector<FeatureSpec> features,
                                             Compression compression) {
  return std::make_unique<TFRecordExampleReader>(path, std::move(features), compression);
}

}  // namespace tk::data
