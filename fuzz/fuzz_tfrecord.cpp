// libFuzzer target for the TFRecord reader, tf.train.Example decoding and open_tfrecord's feature
// conversion (build and run: FUZZ_SECONDS=60 bash tools/run_fuzz.sh fuzz_tfrecord).
//
// Each input is a file. Its records are read with CRC checks and without (so that mutated records still
// reach parse_example), compressed as GZIP / ZLIB too when the input starts like such a stream. Every
// record that decodes as an Example must survive serialize_example -> parse_example unchanged. The records
// are then re-framed with valid CRCs into a second file that open_tfrecord reads with a fixed set of
// FeatureSpecs, so the conversion to tensors is fuzzed as well.
// A tk::Error is the expected answer to bad bytes; any other exception, a crash, a sanitizer report or a
// failed round trip is a finding.
// Seeds (fuzz/corpus/fuzz_tfrecord/): the TensorFlow-written fixtures of tests/fixtures/data/tfrecord/ and
// small files whose Examples use the feature names below.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/formats/crc32c.h"
#include "fuzz_common.h"
#include "trainkit/core/error.h"
#include "trainkit/data/tfrecord.h"

namespace {

using tk::data::Example;
using tk::data::Feature;

bool same_bits(const Feature& a, const Feature& b) {
  if (a.kind != b.kind || a.bytes != b.bytes || a.int64s != b.int64s || a.floats.size() != b.floats.size())
    return false;
  for (size_t i = 0; i < a.floats.size(); ++i)  // bitwise: NaN payloads must survive too
    if (std::bit_cast<uint32_t>(a.floats[i]) != std::bit_cast<uint32_t>(b.floats[i])) return false;
  return true;
}

bool same_bits(const Example& a, const Example& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_bits(ia->second, ib->second)) return false;
  return true;
}

void check_example(const std::string& record) {
  Example e;
  try {
    e = tk::data::parse_example(record);
  } catch (const tk::FormatError&) {
    return;
  }
  std::string again = tk::data::serialize_example(e);
  if (!same_bits(tk::data::parse_example(again), e)) {
    std::fprintf(stderr, "fuzz_tfrecord: serialize_example -> parse_example changed the Example\n");
    std::abort();
  }
}

// Records read (CRCs checked or not); each is also decoded as an Example.
std::vector<std::string> read_records(const std::string& path, bool check_crc, tk::data::Compression c) {
  std::vector<std::string> records;
  try {
    tk::data::TFRecordReader r(path, check_crc, c);
    for (std::string rec; r.next(rec);) {
      check_example(rec);
      if (records.size() < 64) records.push_back(rec);
    }
  } catch (const tk::Error&) {
  }
  return records;
}

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(static_cast<uint8_t>(v >> (8 * i))));
  return out;
}

void read_elements(const std::string& input_path, const std::vector<std::string>& records) {
  std::string framed;
  for (const std::string& r : records) {
    std::string len = le(r.size(), 8);
    framed +=
        len + le(tk::data::masked_crc32c(len.data(), 8), 4) + r + le(tk::data::masked_crc32c(r.data(), r.size()), 4);
  }
  static const std::string path = input_path + ".framed";  // beside the input, same per-process name
  std::remove(path.c_str());                               // see LLVMFuzzerTestOneInput
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (!framed.empty() && std::fwrite(framed.data(), 1, framed.size(), f) != framed.size()) ||
      std::fclose(f) != 0)
    std::abort();  // a harness failure, not a finding
  static const bool cleanup = [] {
    std::atexit([] { std::remove(path.c_str()); });
    return true;
  }();
  (void)cleanup;
  using tk::DType;
  try {
    auto reader = tk::data::open_tfrecord(path, {{"a", DType::f32, {2}},
                                                 {"b", DType::i64, {}, tk::Tensor::from_vector<int64_t>({}, {-1})},
                                                 {"c", DType::u8, {4}, tk::Tensor::from_vector<uint8_t>({1}, {0})},
                                                 {"b", DType::i32, {1}, tk::Tensor::from_vector<int32_t>({1}, {0})},
                                                 {"d", DType::boolean, {2}, tk::Tensor::zeros({2}, DType::boolean)},
                                                 {"c", DType::f16, {2}, tk::Tensor::zeros({2}, DType::f16)}});
    tk::data::Element el;
    volatile uint8_t sink = 0;
    while (reader->next(el)) {
      (void)reader->position();
      // Touch every byte so that a tensor smaller than its shape claims shows up under AddressSanitizer.
      for (const tk::Tensor& t : el) {
        const auto* p = static_cast<const uint8_t*>(t.raw());
        for (size_t i = 0; i < t.nbytes(); ++i) sink = static_cast<uint8_t>(sink ^ p[i]);
      }
    }
  } catch (const tk::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Unlinked first: ext4 flushes a file truncated and rewritten in place when it is closed (auto_da_alloc),
  // which made every input wait for the disk; a fresh file is not flushed.
  std::remove(tk::fuzz::temp_path(".tfrecord").c_str());
  const std::string path = tk::fuzz::write_input(data, size, ".tfrecord");
  using tk::data::Compression;
  read_records(path, true, Compression::none);
  std::vector<std::string> records = read_records(path, false, Compression::none);
  if (size >= 2 && data[0] == 0x1F && data[1] == 0x8B) records = read_records(path, false, Compression::gzip);
  if (size >= 1 && data[0] == 0x78) records = read_records(path, false, Compression::zlib);
  read_elements(path, records);
  return 0;
}
