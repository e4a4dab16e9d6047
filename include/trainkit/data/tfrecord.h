// TFRecord files (tf.io.TFRecordWriter / tf.data.TFRecordDataset) and tf.train.Example records.
//
//   // A dataset of Examples, one tensor per feature, like tf.io.parse_single_example with FixedLenFeature:
//   auto open = [] {
//     return tk::data::open_tfrecord("train.tfrecord", {{"image", tk::DType::f32, {28, 28}},
//                                                       {"label", tk::DType::i64, {}}});
//   };
//   tk::data::Dataset train = tk::data::Dataset::from_reader(open, "tfrecord(train)").batch(128);
//
//   // Raw records, and writing them (to path + ".tmp", renamed to path by close()):
//   tk::data::TFRecordWriter w("out.tfrecord");
//   w.write(tk::data::serialize_example({{"label", tk::data::int64_feature({3})}}));
//   w.close();
//   tk::data::TFRecordReader r("out.tfrecord");
//   for (std::string rec; r.next(rec);) tk::data::Example e = tk::data::parse_example(rec);
//
// Framing (little-endian): uint64 length | uint32 masked CRC32C of the length | data | uint32 masked CRC32C
// of the data. Files may be compressed as a whole (TFRecordOptions' compression_type "GZIP" or "ZLIB").
// Errors are tk::IoError (cannot open, read or write) or tk::FormatError (bad contents); messages name the
// file, the record index and the byte offset (of the decompressed stream for a compressed file).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/data/reader.h"

namespace tk::data {

// Whole-file compression, as TFRecordOptions' compression_type: "" (none), "GZIP", "ZLIB".
enum class Compression { none, gzip, zlib };
// "" / "NONE" -> none, "GZIP" -> gzip, "ZLIB" -> zlib (TensorFlow's spellings); InvalidArgument otherwise.
Compression compression_from_name(std::string_view name);

// ---- records

class TFRecordReader {
 public:
  // Opens the file (IoError if it cannot). check_crc = false skips both CRC checks (lengths are still
  // checked against the bytes present), for salvaging damaged files.
  explicit TFRecordReader(std::string path, bool check_crc = true, Compression compression = Compression::none);
  ~TFRecordReader();
  TFRecordReader(TFRecordReader&&) noexcept;
  TFRecordReader& operator=(TFRecordReader&&) noexcept;

  // Reads the next record into `record`; false at the end of the file. Never allocates more than the
  // bytes actually present: a length beyond the end of the file is a FormatError, not an allocation.
  bool next(std::string& record);
  // Index (from 0) and starting byte offset of the record last returned by next(); -1 and 0 before the first.
  int64_t record_index() const;
  uint64_t offset() const;
  const std::string& path() const;
  // "TFRecord file 'a.tfrecord': record 3 at byte offset 120" (the prefix of this reader's error messages).
  std::string where() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes to path + ".tmp" and renames it to `path` in close(), so `path` never holds a half-written file.
// Destroying a writer that was not closed discards what it wrote (an exception mid-write leaves no file).
class TFRecordWriter {
 public:
  explicit TFRecordWriter(std::string path, Compression compression = Compression::none);
  ~TFRecordWriter();
  TFRecordWriter(TFRecordWriter&&) noexcept;
  TFRecordWriter& operator=(TFRecordWriter&&) noexcept;

  void write(std::string_view record);
  // Flushes, closes and renames; IoError if any of it fails (the .tmp file is then removed). Idempotent.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- tf.train.Example

// One tf.train.Feature: a list of byte strings, floats or int64s. Kind::none is a Feature with no list
// set (valid protobuf; tf.io.parse_example, and open_tfrecord, treat it as a missing feature).
struct Feature {
  enum class Kind { none, bytes, floats, int64s };
  Kind kind = Kind::none;
  std::vector<std::string> bytes;  // kind == bytes
  std::vector<float> floats;       // kind == floats
  std::vector<int64_t> int64s;     // kind == int64s
  bool operator==(const Feature&) const = default;
};
// The helpers of TensorFlow's tutorials (_bytes_feature, _float_feature, _int64_feature).
Feature bytes_feature(std::vector<std::string> values);
Feature float_feature(std::vector<float> values);
Feature int64_feature(std::vector<int64_t> values);
// "bytes_list", "float_list", "int64_list" or "empty Feature" (the protobuf field names).
std::string_view kind_name(Feature::Kind kind);

// Feature name -> value (tf.train.Features' map), ordered by name.
using Example = std::map<std::string, Feature>;

// Decodes a serialized tf.train.Example. Unknown fields are skipped and repeated fields merged as protobuf
// does; packed and unpacked lists are both read. Malformed bytes throw FormatError naming the problem and
// its byte offset within the record (the caller adds the file and record).
Example parse_example(std::string_view record);
// Encodes like protobuf's deterministic serialization (map entries ordered by key, lists packed), so
// TensorFlow's SerializeToString(deterministic=True) output round-trips byte for byte.
std::string serialize_example(const Example& example);

// ---- Examples as tensors

// One output tensor, like tf.io.FixedLenFeature(shape, dtype, default_value). The feature must hold exactly
// shape.numel() values:
//   float32                 <- float_list
//   int64, int32, uint8     <- int64_list (values checked against the dtype's range); bool <- 0 / 1
//   any dtype               <- a bytes_list of one value of exactly numel * dtype_size bytes, little-endian
//                              (tf.io.decode_raw; the usual way to store uint8 images)
// A record without the feature (or with an empty Feature) gets default_value (a tensor of this dtype and
// shape, or one element that is broadcast); without a default it is a FormatError. An empty list is not
// missing: it fails the count check, as in TensorFlow.
struct FeatureSpec {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;  // fully known; {} for a scalar
  std::optional<Tensor> default_value = std::nullopt;
};

// Reads Examples from a TFRecord file; each element holds one tensor per spec, in the order given. Specs are
// checked here (InvalidArgument); each record's problems are FormatErrors naming the file, the record index,
// its byte offset and the feature.
std::unique_ptr<ElementReader> open_tfrecord(const std::string& path, std::vector<FeatureSpec> features,
                                             Compression compression = Compression::none);

}  // namespace tk::data
