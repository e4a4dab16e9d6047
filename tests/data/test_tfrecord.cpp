#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/formats/crc32c.h"
#include "temp_files.h"
#include "trainkit/data/tfrecord.h"
namespace tk::data {
namespace {

// ---- helpers

const std::string kFixtures = std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/tfrecord/";

using test::temp_dir;
using test::temp_path;

std::string read_bytes(const std::string& path) {
  std::string out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  std::string path = temp_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!bytes.empty()) EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  return path;
}

std::string write_records(const std::string& name, const std::vector<std::string>& records,
                          Compression c = Compression::none) {
  std::string path = temp_path(name);
  TFRecordWriter w(path, c);
  for (const std::string& r : records) w.write(r);
  w.close();
  return path;
}

std::vector<std::string> read_all(const std::string& path, Compression c = Compression::none, bool check_crc = true) {
  TFRecordReader r(path, check_crc, c);
  std::vector<std::string> out;
  for (std::string rec; r.next(rec);) out.push_back(rec);
  return out;
}

// Runs fn expecting exception E whose one-line message holds every fragment; returns the message.
template <typename E>
std::string expect_error(const std::function<void()>& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "did not throw; expected: " << ::testing::PrintToString(fragments);
  } catch (const E& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' missing from: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
  return "";
}

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(static_cast<uint8_t>(v >> (8 * i))));
  return out;
}

// One framed record, optionally with a wrong length CRC / data CRC.
std::string frame(const std::string& data, uint64_t length, bool good_crcs = true) {
  std::string len = le(length, 8);
  std::string out = len + le(masked_crc32c(len.data(), 8) + (good_crcs ? 0 : 1), 4) + data;
  return out + le(masked_crc32c(data.data(), data.size()), 4);
}

// The values gen_tfrecord_fixtures.py wrote into example i.
std::vector<float> fixture_image(int i) {
  std::vector<float> v;
  for (int j = 0; j < 6; ++j) v.push_back(static_cast<float>(i - 10) * 0.5f + static_cast<float>(j) * 0.125f);
  return v;
}
std::string fixture_raw(int i) {
  return {static_cast<char>(i), static_cast<char>(i + 1), static_cast<char>(255 - i), 7};
}
std::vector<int64_t> fixture_tags(int i) {
  std::vector<int64_t> v;
  int64_t scale = 1;
  for (int k = 0; k < i % 4; ++k, scale *= 1000) v.push_back((k % 2 ? -1 : 1) * (i + 1) * scale);
  return v;
}
const std::vector<std::string> kPlainRecords = {"hello", "", "trainkit tfrecord",
                                                [] {
                                                  std::string s;
                                                  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
                                                  return s;
                                                }(),
                                                std::string(10, '\0')};

// ---- CRC32C

TEST(Crc32c, KnownVectors) {
  std::string zeros(32, '\0'), ones(32, '\xff'), up, down;
  for (int i = 0; i < 32; ++i) up.push_back(static_cast<char>(i)), down.push_back(static_cast<char>(31 - i));
  struct Case {
    std::string data;
    uint32_t crc;
  };
  // formats.md (TFRecord / TensorBoard) and RFC 3720 appendix B.4.
  const Case cases[] = {{"123456789", 0xE3069283u}, {zeros, 0x8A9136AAu}, {ones, 0x62A8AB43u},
                        {up, 0x46DD794Eu},          {down, 0x113FDB5Cu},  {"", 0u}};
  for (const Case& c : cases) {
    EXPECT_EQ(crc32c(c.data), c.crc) << c.data.size() << " bytes";
    EXPECT_EQ(crc32c_extend_portable(0, c.data.data(), c.data.size()), c.crc);
    if (crc32c_sse42_available()) EXPECT_EQ(crc32c_extend_sse42(0, c.data.data(), c.data.size()), c.crc);
  }
  std::printf("crc32c implementation: %s\n", crc32c_implementation());
}

TEST(Crc32c, ExtendEqualsOneShotAndImplementationsAgree) {
  std::mt19937 rng(7);
  std::string data(5000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  // Every length up to 64 at every alignment up to 8, then a few long ones.
  for (size_t start = 0; start < 8; ++start)
    for (size_t n = 0; n < 64; ++n) {
      uint32_t want = crc32c_extend_portable(0, data.data() + start, n);
      if (crc32c_sse42_available()) ASSERT_EQ(crc32c_extend_sse42(0, data.data() + start, n), want);
      ASSERT_EQ(crc32c(data.data() + start, n), want);
    }
  uint32_t whole = crc32c(data);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{999}, size_t{4999}, data.size()}) {
    uint32_t c = crc32c_extend(crc32c(data.data(), split), data.data() + split, data.size() - split);
    EXPECT_EQ(c, whole) << "split at " << split;
    EXPECT_EQ(
        crc32c_extend_portable(crc32c_extend_portable(0, data.data(), split), data.data() + split, data.size() - split),
        whole);
  }
}

TEST(Crc32c, Mask) {
  for (uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x12345678u}) {
    EXPECT_EQ(unmask_crc32c(mask_crc32c(c)), c);
    EXPECT_NE(mask_crc32c(c), c);
  }
  // The header of the first record of plain.tfrecord, written by TensorFlow: length 5, masked CRC 0x3E04B2EA.
  std::string len = le(5, 8);
  EXPECT_EQ(masked_crc32c(len.data(), 8), 0x3E04B2EAu);
}

// ---- fixtures written by TensorFlow (tests/fixtures/data/tfrecord/gen_tfrecord_fixtures.py)

TEST(TFRecordFixture, PlainRecordsWithIndexAndOffset) {
  TFRecordReader r(kFixtures + "plain.tfrecord");
  EXPECT_EQ(r.record_index(), -1);
  std::string rec;
  uint64_t offset = 0;
  for (size_t i = 0; i < kPlainRecords.size(); ++i) {
    ASSERT_TRUE(r.next(rec)) << i;
    EXPECT_EQ(rec, kPlainRecords[i]) << i;
    EXPECT_EQ(r.record_index(), static_cast<int64_t>(i));
    EXPECT_EQ(r.offset(), offset);
    offset += 16 + kPlainRecords[i].size();
  }
  EXPECT_FALSE(r.next(rec));
  EXPECT_FALSE(r.next(rec));  // stays at the end
  EXPECT_EQ(std::filesystem::file_size(kFixtures + "plain.tfrecord"), offset);
}

TEST(TFRecordFixture, ZlibRecords) {
  EXPECT_EQ(read_all(kFixtures + "plain.tfrecord.zlib", Compression::zlib), kPlainRecords);
}

void check_fixture_examples(const std::vector<std::string>& records) {
  ASSERT_EQ(records.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    Example e = parse_example(records[static_cast<size_t>(i)]);
    ASSERT_EQ(e.size(), 4u);
    EXPECT_EQ(e["image"], float_feature(fixture_image(i))) << i;
    EXPECT_EQ(e["label"], int64_feature({i % 10})) << i;
    EXPECT_EQ(e["raw"], bytes_feature({fixture_raw(i)})) << i;
    EXPECT_EQ(e["tags"], int64_feature(fixture_tags(i))) << i;
    // TensorFlow serialized deterministically; so do we, byte for byte.
    EXPECT_EQ(serialize_example(e), records[static_cast<size_t>(i)]) << i;
  }
}

TEST(TFRecordFixture, ExamplesPlainAndGzip) {
  check_fixture_examples(read_all(kFixtures + "examples.tfrecord"));
  check_fixture_examples(read_all(kFixtures + "examples.tfrecord.gz", Compression::gzip));
}

TEST(TFRecordFixture, OpenTfrecordYieldsOneTensorPerSpec) {
  for (auto [file, c] :
       {std::pair{"examples.tfrecord", Compression::none}, {"examples.tfrecord.gz", Compression::gzip}}) {
    auto reader = open_tfrecord(kFixtures + file,
                                {{"image", DType::f32, {2, 3}},
                                 {"label", DType::i64, {}},
                                 {"raw", DType::u8, {4}},
                                 {"label", DType::u8, {1}},
                                 {"label", DType::i32, {}},
                                 {"absent", DType::f32, {2}, Tensor::from_vector<float>({2}, {1.5f, -2.0f})}},
                                c);
    EXPECT_NE(reader->position().find("before the first record"), std::string::npos);
    Element el;
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(reader->next(el)) << i;
      ASSERT_EQ(el.size(), 6u);
      EXPECT_EQ(el[0].shape(), (Shape{2, 3}));
      for (int j = 0; j < 6; ++j) EXPECT_EQ(el[0].data<float>()[j], fixture_image(i)[static_cast<size_t>(j)]);
      EXPECT_EQ(el[1].shape(), Shape{});
      EXPECT_EQ(el[1].data<int64_t>()[0], i % 10);
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(el[2].data<uint8_t>()[j], static_cast<uint8_t>(fixture_raw(i)[static_cast<size_t>(j)]));
      EXPECT_EQ(el[3].data<uint8_t>()[0], i % 10);
      EXPECT_EQ(el[4].data<int32_t>()[0], i % 10);
      EXPECT_EQ(el[5].data<float>()[0], 1.5f);
      EXPECT_EQ(el[5].data<float>()[1], -2.0f);
    }
    EXPECT_NE(reader->position().find("record 19"), std::string::npos) << reader->position();
    EXPECT_FALSE(reader->next(el));
  }
}

// ---- writer

TEST(TFRecordWriter, MatchesTensorFlowByteForByte) {
  std::string path = write_records("plain_ours.tfrecord", kPlainRecords);
  EXPECT_EQ(read_bytes(path), read_bytes(kFixtures + "plain.tfrecord"));
}

class TFRecordRoundTrip : public ::testing::TestWithParam<Compression> {};

TEST_P(TFRecordRoundTrip, WriterToReader) {
  std::mt19937 rng(3);
  std::vector<std::string> records = {"", "x", std::string(1000, 'a'), ""};
  std::string big(3 << 20, '\0');  // above the reader's 1 MiB chunk, so compressed records grow in steps
  for (char& c : big) c = static_cast<char>(rng() % 7);
  records.push_back(big);
  records.push_back("tail");
  std::string path = temp_path("round_trip_" + std::to_string(static_cast<int>(GetParam())));
  {
    TFRecordWriter w(path, GetParam());
    for (const std::string& r : records) w.write(r);
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before close()";
    EXPECT_TRUE(std::filesystem::exists(path + ".tmp"));
    w.close();
    w.close();  // idempotent
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(read_all(path, GetParam()), records);
  if (GetParam() != Compression::none) EXPECT_LT(std::filesystem::file_size(path), big.size());
}

INSTANTIATE_TEST_SUITE_P(Compressions, TFRecordRoundTrip,
                         ::testing::Values(Compression::none, Compression::gzip, Compression::zlib));

TEST(TFRecordWriter, UnclosedWriterLeavesNoFile) {
  std::string path = temp_path("abandoned.tfrecord");
  {
    TFRecordWriter w(path);
    w.write("half");
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(TFRecordWriter, ErrorsNameThePath) {
  std::string path = temp_path("no_such_dir/out.tfrecord");
  expect_error<IoError>([&] { TFRecordWriter w(path); }, {path, "cannot create"});
  std::string closed = temp_path("closed.tfrecord");
  TFRecordWriter w(closed);
  w.close();
  expect_error<InvalidArgument>([&] { w.write("late"); }, {closed, "after close"});
}

TEST(TFRecord, CompressionNames) {
  EXPECT_EQ(compression_from_name(""), Compression::none);
  EXPECT_EQ(compression_from_name("GZIP"), Compression::gzip);
  EXPECT_EQ(compression_from_name("ZLIB"), Compression::zlib);
  expect_error<InvalidArgument>([] { compression_from_name("gz"); }, {"'gz'", "GZIP"});
}

// ---- Example encoding

TEST(Example, SerializeParseRoundTrip) {
  Example e;
  e["floats"] = float_feature({0.0f, -1.5f, 3.25e30f, -0.0f, std::numeric_limits<float>::infinity()});
  e["ints"] = int64_feature({0, 1, -1, INT64_MAX, INT64_MIN, 300, -300});
  e["bytes"] = bytes_feature({"", std::string("\0\x01\xff", 3), std::string(300, 'z')});
  e["empty_floats"] = float_feature({});
  e["empty_ints"] = int64_feature({});
  e["empty_bytes"] = bytes_feature({});
  e["nothing"] = Feature{};
  e[""] = int64_feature({42});
  e[std::string("k\0ey", 4)] = float_feature({1.0f});
  EXPECT_EQ(parse_example(serialize_example(e)), e);
  EXPECT_EQ(parse_example(serialize_example(Example{})), Example{});
  EXPECT_EQ(parse_example(""), Example{});
  // NaN payloads survive bit for bit.
  float nan = std::bit_cast<float>(0x7FC01234u);
  Example n = parse_example(serialize_example({{"nan", float_feature({nan})}}));
  EXPECT_EQ(std::bit_cast<uint32_t>(n["nan"].floats.at(0)), 0x7FC01234u);
}

// Hand-built protobuf, for what TensorFlow's serializer never writes but other writers may.
std::string varint(uint64_t v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7F) | 0x80));
  out.push_back(static_cast<char>(v));
  return out;
}
std::string field(uint32_t number, int wire, const std::string& payload = {}) {
  std::string tag = varint(uint64_t{number} << 3 | static_cast<uint32_t>(wire));
  return wire == 2 ? tag + varint(payload.size()) + payload : tag + payload;
}
std::string entry(const std::string& key, const std::string& feature) {
  return field(1, 2, field(1, 2, key) + field(2, 2, feature));
}
std::string example_of(const std::string& entries) { return field(1, 2, entries); }

TEST(Example, UnpackedListsUnknownFieldsAndMerging) {
  const std::string unknown = field(7, 0, varint(99)) + field(8, 1, std::string(8, 'x')) + field(9, 5, "abcd") +
                              field(10, 2, "junk") +
                              field(11, 3, field(1, 0, varint(1)) + field(12, 3) + field(12, 4)) + field(11, 4);
  std::string floats =
      field(2, 2,
            unknown + field(1, 5, le(std::bit_cast<uint32_t>(1.5f), 4)) +
                field(1, 2, le(std::bit_cast<uint32_t>(2.5f), 4)) + field(1, 5, le(std::bit_cast<uint32_t>(3.5f), 4)));
  std::string ints = field(3, 2,
                           field(1, 0, varint(5)) + unknown + field(1, 2, varint(6) + varint(7)) +
                               field(1, 0, varint(static_cast<uint64_t>(-8))));
  std::string record =
      unknown + example_of(unknown + entry("f", floats + unknown) + entry("i", ints)) +
      // A second Features message merges; a repeated key replaces the earlier entry.
      example_of(entry("b", field(1, 2, field(1, 2, "one"))) + entry("i", ints + ints)) +
      // A Feature whose list is given twice merges; switching the oneof member replaces it.
      example_of(entry("m", field(3, 2, field(1, 0, varint(1))) + field(3, 2, field(1, 0, varint(2)))) +
                 entry("s", field(3, 2, field(1, 0, varint(1))) + field(2, 2, "")));
  Example e = parse_example(record);
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e["f"], float_feature({1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(e["i"], int64_feature({5, 6, 7, -8, 5, 6, 7, -8}));
  EXPECT_EQ(e["b"], bytes_feature({"one"}));
  EXPECT_EQ(e["m"], int64_feature({1, 2}));
  EXPECT_EQ(e["s"], float_feature({}));
  // A map entry without key or value: the empty key and an empty Feature, as protobuf defaults them.
  EXPECT_EQ(parse_example(example_of(field(1, 2, ""))), (Example{{"", Feature{}}}));
}

TEST(Example, MalformedBytesAreFormatErrors) {
  struct Case {
    std::string bytes;
    std::string fragment;
  };
  const std::string good = serialize_example({{"a", float_feature({1.0f})}});
  const Case cases[] = {
      {"\x0a", "truncated varint"},
      {"\x0a\x05\x0a", "claims 5 bytes but only 1 remain"},
      {good.substr(0, good.size() - 1), "claims"},
      {std::string("\x00", 1), "field number 0"},
      {"\x0e", "wire type 6"},
      {"\x0f", "wire type 7"},
      {"\x0c", "without a group to close"},
      {"\x0b\x08", "truncated varint"},
      {"\x0b", "is not closed"},
      {"\x0b\x14", "closes the group of field 1"},
      {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "longer than 10 bytes"},
      {"\x80\x80\x80\x80\x80\x01", "does not fit in 32 bits"},
      {"\x09\x01\x02", "truncated fixed64"},
      {"\x0d\x01", "truncated fixed32"},
      {example_of(entry("x", field(2, 2, field(1, 2, "abc")))), "packed float_list of 3 bytes"},
      {example_of(entry("x", field(3, 2, field(1, 2, "\x80")))), "truncated varint in packed int64_list"},
      {std::string(101, '\x0b'), "nested more than 100"},
  };
  for (const Case& c : cases)
    expect_error<FormatError>([&] { parse_example(c.bytes); }, {"malformed tf.train.Example", c.fragment, "at byte"});
  // Offsets count from the start of the record, also inside nested messages.
  std::string bad = example_of(entry("x", field(3, 2, field(1, 2, "\x80"))));
  expect_error<FormatError>([&] { parse_example(bad); }, {"at byte " + std::to_string(bad.size() - 1)});
}

// ---- damaged files

// Three records written by our writer: offsets 0, 21 and 50.
const std::vector<std::string> kThree = {"alpha", "bravo-charlie", "delta"};
constexpr uint64_t kSecond = 21;

// Reads all records of path, expecting the first to succeed and the error to come from record 1.
template <typename E = FormatError>
std::string expect_second_fails(const std::string& path, const std::vector<std::string>& fragments,
                                bool check_crc = true) {
  TFRecordReader r(path, check_crc);
  std::string rec;
  EXPECT_TRUE(r.next(rec));
  EXPECT_EQ(rec, kThree[0]);
  std::vector<std::string> all = fragments;
  all.insert(all.end(), {path, "record 1", "byte offset " + std::to_string(kSecond)});
  return expect_error<E>([&] { r.next(rec); }, all);
}

TEST(TFRecordDamage, TruncatedAtEveryPartOfARecord) {
  const std::string bytes = read_bytes(write_records("three.tfrecord", kThree));
  ASSERT_EQ(bytes.size(), 16 * 3 + 5 + 13 + 5u);
  struct Cut {
    uint64_t at;
    std::string fragment;
  };
  const Cut cuts[] = {
      {kSecond + 3, "truncated record header: the file ends 3 bytes into the 12-byte header"},    // in the length
      {kSecond + 10, "truncated record header: the file ends 10 bytes into the 12-byte header"},  // in the length CRC
      {kSecond + 12 + 4, "record length 13 (in the header) exceeds the 4 bytes left"},            // in the data
      {kSecond + 12 + 13 + 2, "the file ends 2 bytes into the 4-byte data CRC"},                  // in the data CRC
  };
  for (const Cut& c : cuts) {
    std::string path = write_bytes("cut_" + std::to_string(c.at), bytes.substr(0, c.at));
    expect_second_fails(path, {c.fragment});
    expect_second_fails(path, {c.fragment}, /*check_crc=*/false);
  }
  // Cut at a record boundary: a shorter, valid file.
  EXPECT_EQ(read_all(write_bytes("cut_boundary", bytes.substr(0, kSecond))), std::vector<std::string>{"alpha"});
  EXPECT_EQ(read_all(write_bytes("empty", "")), std::vector<std::string>{});
}

TEST(TFRecordDamage, FlippedBytesFailTheirCrc) {
  const std::string bytes = read_bytes(write_records("three_flip.tfrecord", kThree));
  std::string data_flip = bytes;
  data_flip[kSecond + 12 + 3] ^= 0x20;
  std::string path = write_bytes("flip_data", data_flip);
  expect_second_fails(path, {"bad data CRC", "byte offset " + std::to_string(kSecond + 12), "check_crc=false"});
  // Without CRC checks the damaged record is returned as it is.
  std::vector<std::string> salvaged = read_all(path, Compression::none, false);
  ASSERT_EQ(salvaged.size(), 3u);
  EXPECT_EQ(salvaged[1], "braVo-charlie");

  std::string len_flip = bytes;
  len_flip[kSecond] ^= 0x01;  // length 13 -> 12
  expect_second_fails(write_bytes("flip_len", len_flip),
                      {"bad length CRC", "byte offset " + std::to_string(kSecond + 8)});
  std::string crc_flip = bytes;
  crc_flip[kSecond + 9] ^= 0x01;
  expect_second_fails(write_bytes("flip_len_crc", crc_flip), {"bad length CRC"});
}

TEST(TFRecordDamage, HugeLengthIsAnErrorNotAnAllocation) {
  for (uint64_t huge : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{1} << 33}) {
    std::string bytes = frame("alpha", 5) + frame("tiny", huge);  // a valid CRC over the huge length
    std::string path = write_bytes("huge", bytes);
    expect_second_fails(
        path, {"record length " + std::to_string(huge), "exceeds the 8 bytes left", "the length's CRC is valid"});
    expect_second_fails(path, {"record length " + std::to_string(huge)}, /*check_crc=*/false);
  }
  // A compressed stream has no known size: the reader takes the bytes that arrive, then reports the end.
  std::string path = temp_path("huge.tfrecord.gz");
  std::string raw = frame("alpha", 5) + frame("tiny", uint64_t{1} << 60);
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, raw.data(), static_cast<unsigned>(raw.size())), static_cast<int>(raw.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  TFRecordReader r(path, true, Compression::gzip);
  std::string rec;
  ASSERT_TRUE(r.next(rec));
  expect_error<FormatError>([&] { r.next(rec); }, {path, "record 1 at byte offset 21 of the decompressed stream",
                                                   "promises 1152921504606846976 data bytes", "ends after 8"});
}

TEST(TFRecordDamage, CompressedStreams) {
  std::string gz = temp_path("three.tfrecord.gz");
  {
    TFRecordWriter w(gz, Compression::gzip);
    for (const std::string& r : kThree) w.write(r);
    w.close();
  }
  const std::string bytes = read_bytes(gz);
  // Cut anywhere: an error (truncated record or stream), never a crash or a silently short read.
  for (size_t cut = 1; cut < bytes.size(); ++cut) {
    std::string path = write_bytes("cut.gz", bytes.substr(0, cut));
    expect_error<FormatError>([&] { read_all(path, Compression::gzip); }, {path});
  }
  // Garbage inside the deflate data.
  std::string corrupt = bytes;
  for (size_t i = 10; i < corrupt.size() - 8; ++i) corrupt[i] = static_cast<char>(0xFF);  // invalid block type
  std::string path = write_bytes("corrupt.gz", corrupt);
  expect_error<FormatError>([&] { read_all(path, Compression::gzip); }, {path, "corrupt compressed stream"});
  // The wrong compression in either direction says so.
  expect_error<FormatError>([&] { read_all(gz); }, {gz, "record 0 at byte offset 0", "Compression::gzip"});
  std::string plain = write_records("plain_as_gzip.tfrecord", kThree);
  expect_error<FormatError>([&] { read_all(plain, Compression::gzip); }, {plain, "compression_type \"GZIP\""});
  // Two gzip members back to back (as `cat a.gz b.gz` makes) read as one stream.
  std::string twice = write_bytes("twice.gz", bytes + bytes);
  std::vector<std::string> six = kThree;
  six.insert(six.end(), kThree.begin(), kThree.end());
  EXPECT_EQ(read_all(twice, Compression::gzip), six);
}

TEST(TFRecordDamage, MissingFileAndDirectory) {
  std::string missing = temp_path("missing.tfrecord");
  expect_error<IoError>([&] { TFRecordReader r(missing); }, {missing, "cannot open", "No such file"});
  expect_error<IoError>([&] { open_tfrecord(missing, {{"x", DType::f32, {1}}}); }, {missing});
  expect_error<IoError>([&] { TFRecordReader r(temp_dir().string()); }, {"directory"});
}

// ---- Examples as tensors: per-record problems

std::string examples_file(const std::string& name, const std::vector<Example>& examples) {
  std::vector<std::string> records;
  for (const Example& e : examples) records.push_back(serialize_example(e));
  return write_records(name, records);
}

// Reads every element; expects the failure at record 1 (the first example is always good).
std::string expect_feature_error(const std::string& path, const std::vector<FeatureSpec>& specs,
                                 const std::vector<std::string>& fragments) {
  auto r = open_tfrecord(path, specs);
  Element el;
  EXPECT_TRUE(r->next(el));
  std::vector<std::string> all = fragments;
  all.insert(all.end(), {path, "record 1 at byte offset "});
  return expect_error<FormatError>([&] { r->next(el); }, all);
}

TEST(TFRecordExamples, WrongKindCountRangeAndRawSize) {
  Example good = {{"x", float_feature({1, 2})}, {"n", int64_feature({1})}, {"raw", bytes_feature({"ab"})}};
  auto with = [&](const std::string& name, Feature f) {
    Example e = good;
    e[name] = std::move(f);
    return examples_file("feature_" + name, {good, e});
  };
  const std::vector<FeatureSpec> specs = {{"x", DType::f32, {2}}, {"n", DType::u8, {}}, {"raw", DType::u8, {2}}};
  expect_feature_error(with("x", int64_feature({1, 2})), specs,
                       {"feature 'x' is an int64_list", "float32 (2,) is read from a float_list"});
  expect_feature_error(with("x", float_feature({1, 2, 3})), specs,
                       {"feature 'x' is a float_list of 3 values, but float32 (2,) needs 2"});
  expect_feature_error(with("x", float_feature({})), specs, {"feature 'x' is a float_list of 0 values"});
  expect_feature_error(with("x", Feature{}), specs, {"feature 'x' is an empty Feature (no list set)", "default_value"});
  expect_feature_error(with("n", int64_feature({256})), specs,
                       {"feature 'n' value 256 at index 0 does not fit in uint8"});
  expect_feature_error(with("n", int64_feature({-1})), specs, {"value -1"});
  expect_feature_error(with("n", float_feature({1})), specs, {"feature 'n' is a float_list", "int64_list"});
  expect_feature_error(with("raw", bytes_feature({"abc"})), specs,
                       {"feature 'raw' holds 3 raw bytes, but uint8 (2,) needs 2"});
  expect_feature_error(with("raw", bytes_feature({"a", "b"})), specs, {"bytes_list of 2 values", "decode_raw"});
  expect_feature_error(with("n", int64_feature({1, 2})), {{"n", DType::i64, {}}}, {"of 2 values"});
}

TEST(TFRecordExamples, MissingFeatureWithAndWithoutDefault) {
  Example full = {{"x", float_feature({1, 2})}, {"label", int64_feature({4})}};
  Example partial = {{"x", float_feature({3, 4})}, {std::string("odd\nname"), int64_feature({})}};
  Example empty = {{"label", Feature{}}};  // an empty Feature counts as missing, as in TensorFlow
  std::string path = examples_file("missing_feature", {full, partial, empty});
  std::string msg = expect_feature_error(path, {{"x", DType::f32, {2}}, {"label", DType::i64, {}}},
                                         {"feature 'label' is missing", "features: odd\\x0aname, x", "default_value"});
  // A default of the full shape, and a one-element default broadcast to the shape.
  auto r = open_tfrecord(path, {{"label", DType::i64, {}, Tensor::from_vector<int64_t>({}, {-1})},
                                {"weight", DType::i32, {2, 2}, Tensor::from_vector<int32_t>({1}, {7})}});
  Element el;
  ASSERT_TRUE(r->next(el));
  EXPECT_EQ(el[0].data<int64_t>()[0], 4);
  ASSERT_TRUE(r->next(el));
  EXPECT_EQ(el[0].data<int64_t>()[0], -1);
  EXPECT_EQ(el[1].shape(), (Shape{2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(el[1].data<int32_t>()[i], 7);
  el[0].data<int64_t>()[0] = 99;  // each element owns its default: changing one does not leak into the next
  el[1].data<int32_t>()[0] = 99;
  ASSERT_TRUE(r->next(el));
  EXPECT_EQ(el[0].data<int64_t>()[0], -1);
  EXPECT_EQ(el[1].data<int32_t>()[0], 7);
  EXPECT_FALSE(r->next(el));
}

TEST(TFRecordExamples, MalformedRecordNamesFileAndRecord) {
  std::string path =
      write_records("not_examples.tfrecord", {serialize_example({{"x", float_feature({1})}}), "\x0a\x09oops"});
  expect_feature_error(path, {{"x", DType::f32, {1}}},
                       {"malformed tf.train.Example", "claims 9 bytes", "at byte 1 of the record", "not a serialized"});
}

TEST(TFRecordExamples, RawBytesAndBools) {
  Example e = {{"f", bytes_feature({le(std::bit_cast<uint32_t>(2.5f), 4) + le(std::bit_cast<uint32_t>(-1.0f), 4)})},
               {"b", int64_feature({0, 1, 1})},
               {"braw", bytes_feature({std::string("\x01\x00", 2)})},
               {"h", bytes_feature({std::string("\x00\x3c", 2)})}};  // float16 1.0
  std::string path = examples_file("raw", {e, {{"b", int64_feature({0, 2, 1})}, {"braw", bytes_feature({"\x02"})}}});
  auto r = open_tfrecord(path, {{"f", DType::f32, {2}, Tensor::zeros({2})},
                                {"b", DType::boolean, {3}},
                                {"braw", DType::boolean, {2}, Tensor::zeros({2}, DType::boolean)},
                                {"h", DType::f16, {}, Tensor::zeros({}, DType::f16)}});
  Element el;
  ASSERT_TRUE(r->next(el));
  EXPECT_EQ(el[0].data<float>()[0], 2.5f);
  EXPECT_EQ(el[0].data<float>()[1], -1.0f);
  EXPECT_EQ(el[1].data<bool>()[1], true);
  EXPECT_EQ(el[2].data<bool>()[0], true);
  EXPECT_EQ(el[2].data<bool>()[1], false);
  EXPECT_EQ(static_cast<const uint8_t*>(el[3].raw())[1], 0x3C);
  expect_error<FormatError>([&] { r->next(el); }, {"feature 'b' value 2 at index 1 does not fit in bool"});
}

TEST(TFRecordExamples, InvalidSpecsAreRejectedAtOpen) {
  std::string path = examples_file("specs", {{{"x", float_feature({1})}}});
  expect_error<InvalidArgument>([&] { open_tfrecord(path, {}); }, {path, "no FeatureSpec"});
  expect_error<InvalidArgument>([&] { open_tfrecord(path, {{"x", DType::f32, {-1, 2}}}); }, {"'x'", "fully known"});
  expect_error<InvalidArgument>(
      [&] {
        open_tfrecord(path, {{"x", DType::f32, {3}, Tensor::zeros({2})}});
      },
      {"'x'", "default_value is float32 (2,) but the feature is float32 (3,)"});
  expect_error<InvalidArgument>(
      [&] {
        open_tfrecord(path, {{"x", DType::i64, {1}, Tensor::zeros({1})}});
      },
      {"default_value is float32"});
}

}  // namespace
}  // namespace tk::data
