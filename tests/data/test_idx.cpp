#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "temp_files.h"
#include "trainkit/data/idx.h"
namespace tk::data {
namespace {

using Bytes = std::vector<uint8_t>;

using test::temp_dir;
using test::temp_path;

// Writes bytes as-is, or through zlib's gzip writer (what `gzip` produces).
std::string write_file(const std::string& name, const Bytes& bytes, bool gz = false) {
  std::string path = temp_path(name + (gz ? ".gz" : ""));
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    }
    std::fclose(f);
  }
  return path;
}

Bytes read_raw(const std::string& path) {
  Bytes out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return out;
}

void put_be(Bytes& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

Bytes header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be(out, d, 4);
  return out;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Runs load_idx expecting exception E whose message holds every fragment; returns the message.
template <typename E>
std::string expect_error(const std::string& path, const std::vector<std::string>& fragments) {
  try {
    load_idx(path);
    ADD_FAILURE() << "load_idx('" << path << "') did not throw";
  } catch (const E& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << "path missing from: " << msg;
    for (const std::string& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' missing from: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
  return "";
}

// ---- round trips ----

class IdxRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTrip, Uint8) {
  Bytes data = {0, 1, 127, 128, 254, 255};
  Tensor t = load_idx(write_file("u8", cat(header(0x08, {2, 3}), data), GetParam()));
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(t.data<uint8_t>()[i], data[i]);
}

TEST_P(IdxRoundTrip, Int32WithNegatives) {
  std::vector<int32_t> values = {0, 1, -1, 123456789, -123456789, INT32_MAX, INT32_MIN, -2};
  Bytes bytes = header(0x0C, {2, 2, 2});
  for (int32_t v : values) put_be(bytes, static_cast<uint32_t>(v), 4);
  Tensor t = load_idx(write_file("i32", bytes, GetParam()));
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (Shape{2, 2, 2}));
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(t.data<int32_t>()[i], values[i]);
}

TEST_P(IdxRoundTrip, Float32) {
  std::vector<float> values = {0.0f, -0.5f, 3.25f, 1e-30f, -1e30f};
  Bytes bytes = header(0x0D, {5});
  for (float v : values) put_be(bytes, std::bit_cast<uint32_t>(v), 4);
  Tensor t = load_idx(write_file("f32", bytes, GetParam()));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (Shape{5}));
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(t.data<float>()[i], values[i]);
}

TEST_P(IdxRoundTrip, Int8Int16Float64) {
  Tensor i8 = load_idx(write_file("i8", cat(header(0x09, {3}), {0x80, 0xFF, 0x7F}), GetParam()));
  EXPECT_EQ(i8.dtype(), DType::i32);
  EXPECT_EQ(i8.data<int32_t>()[0], -128);
  EXPECT_EQ(i8.data<int32_t>()[1], -1);
  EXPECT_EQ(i8.data<int32_t>()[2], 127);

  Tensor i16 = load_idx(write_file("i16", cat(header(0x0B, {3}), {0x80, 0x00, 0xFF, 0xFE, 0x01, 0x02}), GetParam()));
  EXPECT_EQ(i16.dtype(), DType::i32);
  EXPECT_EQ(i16.data<int32_t>()[0], -32768);
  EXPECT_EQ(i16.data<int32_t>()[1], -2);
  EXPECT_EQ(i16.data<int32_t>()[2], 258);

  Bytes f64 = header(0x0E, {3});
  for (double v : {-2.5, 1e300, 0.125}) put_be(f64, std::bit_cast<uint64_t>(v), 8);
  Tensor f = load_idx(write_file("f64", f64, GetParam()));
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.data<float>()[0], -2.5f);
  EXPECT_TRUE(std::isinf(f.data<float>()[1]));  // beyond float's range: saturates, no undefined conversion
  EXPECT_EQ(f.data<float>()[2], 0.125f);
}

TEST_P(IdxRoundTrip, ZeroSizedDimension) {
  Tensor t = load_idx(write_file("empty_dim", header(0x08, {0, 28, 28}), GetParam()));
  EXPECT_EQ(t.shape(), (Shape{0, 28, 28}));
}

INSTANTIATE_TEST_SUITE_P(IdxPlainAndGzip, IdxRoundTrip, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "gzip" : "plain"; });

// ---- errors ----

TEST(IdxErrors, MissingFile) {
  expect_error<IoError>(temp_path("does_not_exist"), {"cannot open", "No such file or directory"});
}

TEST(IdxErrors, DirectoryIsAReadError) {
  std::string dir = temp_path("a_directory");
  std::filesystem::create_directories(dir);
  expect_error<IoError>(dir, {"Is a directory"});
}

TEST(IdxErrors, EmptyFile) {
  expect_error<FormatError>(write_file("empty", {}), {"truncated header at byte offset 0:", "the file is empty"});
}

TEST(IdxErrors, BadMagicNamesTheBytes) {
  std::string path = write_file("zip", {'P', 'K', 3, 4, 20, 0, 0, 0});
  expect_error<FormatError>(path, {"bad magic at byte offset 0:", "found bytes 50 4b 03 04", "neither"});
}

TEST(IdxErrors, BadMagicInsideGzip) {
  std::string path = write_file("text", {'h', 'e', 'l', 'l', 'o', '\n'}, true);
  expect_error<FormatError>(path, {"bad magic at byte offset 0 of the decompressed stream", "68 65 6c 6c"});
}

TEST(IdxErrors, UnknownTypeCode) {
  expect_error<FormatError>(write_file("type07", cat(header(0x07, {1}), {0})),
                            {"unknown type code at byte offset 2", "0x07"});
}

TEST(IdxErrors, RankZero) {
  expect_error<FormatError>(write_file("rank0", {0, 0, 8, 0}), {"bad rank at byte offset 3", "rank 0"});
}

TEST(IdxErrors, RankNine) {
  Bytes b = header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  expect_error<FormatError>(write_file("rank9", cat(b, {7})), {"bad rank at byte offset 3", "rank 9"});
}

TEST(IdxErrors, DimensionOverFourGiB) {
  // 2^30 float32 values are exactly 4 GiB (allowed); the second dimension doubles that.
  std::string path = write_file("huge_f32", header(0x0D, {1u << 30, 2}));
  expect_error<FormatError>(path, {"dimension too large at byte offset 8", "dimension 1 is 2", "4 GiB"});
}

TEST(IdxErrors, DimensionOverflow) {
  // Unchecked, 2^32-1 cubed times 8 bytes wraps around 64 bits.
  std::string path = write_file("overflow", header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}));
  expect_error<FormatError>(path, {"dimension too large at byte offset 4", "4294967295"});
}

TEST(IdxErrors, HugeClaimWithLittleDataIsTruncationNotAllocation) {
  // 4 GiB is within the limit, but the file holds 10 bytes: memory must follow the data, not the header.
  std::string path = write_file("claims_4gib", cat(header(0x08, {65536, 65536}), Bytes(10, 1)));
  expect_error<FormatError>(path, {"truncated at byte offset 22", "expected 4294967296 data bytes", "got 10"});
}

TEST(IdxErrors, TruncatedMagic) {
  expect_error<FormatError>(write_file("magic3", {0, 0, 8}), {"truncated header at byte offset 3", "got 3 bytes"});
}

TEST(IdxErrors, TruncatedRealSizeHeader) {
  // The first 10 of the 16 header bytes of train-images-idx3-ubyte: (60000, 28, 28) cut inside the 2nd dimension.
  Bytes full = header(0x08, {60000, 28, 28});
  for (bool gz : {false, true}) {
    std::string path = write_file("header10", Bytes(full.begin(), full.begin() + 10), gz);
    expect_error<FormatError>(path, {"truncated header at byte offset 10", "expected 16 header bytes", "got 10"});
  }
}

TEST(IdxErrors, TruncatedData) {
  Bytes b = cat(header(0x08, {10, 28, 28}), Bytes(1000, 7));
  expect_error<FormatError>(write_file("trunc", b), {"truncated at byte offset 1016:", "got 1000",
                                                     "expected 7840 data bytes for shape (10, 28, 28)"});
  expect_error<FormatError>(write_file("trunc", b, true),
                            {"truncated at byte offset 1016 of the decompressed stream", "got 1000"});
}

TEST(IdxErrors, TruncatedGzipStream) {
  // Incompressible data, so cutting the compressed file in half cuts the deflate stream mid-way.
  std::mt19937 rng(1);
  Bytes b = header(0x08, {20000});
  for (int i = 0; i < 20000; ++i) b.push_back(static_cast<uint8_t>(rng()));
  Bytes gz = read_raw(write_file("rand_full", b, true));
  std::string path = write_file("gz_cut", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  expect_error<FormatError>(path, {"truncated at byte offset", "of the decompressed stream",
                                   "expected 20000 data bytes", "unexpected end of file"});
}

// The compressed offset in a corrupt-stream message, checked to lie inside the file.
void expect_compressed_offset_within(const std::string& msg, size_t lo, size_t hi) {
  const std::string key = "corrupt gzip stream at byte offset ";
  size_t at = msg.find(key);
  ASSERT_NE(at, std::string::npos) << msg;
  size_t offset = std::stoul(msg.substr(at + key.size()));
  EXPECT_GE(offset, lo) << msg;
  EXPECT_LE(offset, hi) << msg;
}

TEST(IdxErrors, CorruptGzipBlock) {
  Bytes gz = read_raw(write_file("to_corrupt", cat(header(0x08, {100}), Bytes(100, 3)), true));
  gz[10] = 0xFF;  // first deflate block header (after the 10-byte gzip header): BTYPE 11 is reserved
  std::string path = write_file("corrupt_block", gz);
  std::string msg = expect_error<FormatError>(path, {"of the compressed file", "invalid block type"});
  expect_compressed_offset_within(msg, 10, 12);
}

TEST(IdxErrors, CorruptGzipChecksum) {
  Bytes gz = read_raw(write_file("to_corrupt_crc", cat(header(0x08, {100}), Bytes(100, 3)), true));
  gz[gz.size() - 8] ^= 0xFF;  // CRC-32 in the gzip trailer: the data all decode, the check fails at the end
  std::string path = write_file("corrupt_crc", gz);
  std::string msg = expect_error<FormatError>(path, {"of the compressed file", "incorrect data check"});
  expect_compressed_offset_within(msg, gz.size() - 8, gz.size());
}

TEST(IdxErrors, GzipCutInsideItsHeader) {
  for (Bytes b : {Bytes{0x1f, 0x8b}, Bytes{0x1f, 0x8b, 0x08}, Bytes{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3}}) {
    SCOPED_TRACE(std::to_string(b.size()) + " bytes");
    expect_error<FormatError>(write_file("gz_header_cut", b),
                              {"truncated header at byte offset 0 of the decompressed stream",
                               "decompressed stream is empty", "gzip stream stops early"});
  }
}

TEST(IdxErrors, TrailingBytes) {
  Bytes b = cat(header(0x08, {4}), {1, 2, 3, 4, 5, 6});
  expect_error<FormatError>(write_file("trailing", b), {"trailing bytes at byte offset 12:", "shape (4,)"});
  expect_error<FormatError>(write_file("trailing", b, true),
                            {"trailing bytes at byte offset 12 of the decompressed stream"});
}

TEST(IdxErrors, RandomBytes) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    std::mt19937 rng(seed);
    Bytes b(4096);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_error<FormatError>(write_file("random", b), {"at byte offset"});
  }
}

// ---- pairs ----

TEST(IdxPair, LoadsMatchingFiles) {
  auto [x, y] = load_idx_pair(write_file("pair_x", cat(header(0x08, {3, 2}), Bytes(6, 9))),
                              write_file("pair_y", cat(header(0x08, {3}), {0, 1, 2}), true));
  EXPECT_EQ(x.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.shape(), (Shape{3}));
}

TEST(IdxPair, CountMismatch) {
  std::string images = write_file("mismatch_x", cat(header(0x08, {3, 2}), Bytes(6, 9)));
  std::string labels = write_file("mismatch_y", cat(header(0x08, {4}), {0, 1, 2, 3}));
  try {
    load_idx_pair(images, labels);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    std::string msg = e.what();
    for (const std::string& f : {images, labels, std::string("hold 3 samples"), std::string("hold 4")})
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' missing from: " << msg;
  }
}

// ---- Fashion-MNIST ----

TEST(IdxFashionMnist, DefaultDirHonoursEnvironment) {
  const char* old = std::getenv("TK_FASHION_MNIST_DIR");
  std::string saved = old ? old : "";
  unsetenv("TK_FASHION_MNIST_DIR");
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  setenv("TK_FASHION_MNIST_DIR", "/data/fm", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/data/fm");
  if (old)
    setenv("TK_FASHION_MNIST_DIR", saved.c_str(), 1);
  else
    unsetenv("TK_FASHION_MNIST_DIR");
}

TEST(IdxFashionMnist, MissingFileNamesDirectoryAndFile) {
  std::string dir = temp_path("fm_empty_dir");
  std::filesystem::create_directories(dir);
  try {
    load_fashion_mnist(dir);
    FAIL() << "no exception";
  } catch (const IoError& e) {
    std::string msg = e.what();
    for (const char* f : {"train-images-idx3-ubyte.gz", "dataset-fashion-mnist", "pass the directory"})
      EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' missing from: " << msg;
    EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  }
}

TEST(IdxFashionMnist, AcceptsPlainAndGzipNamesAndScales) {
  std::string dir = temp_path("fm_small");
  std::filesystem::create_directories(dir);
  Bytes pixels(3 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i % 256);
  auto put = [&](const std::string& name, const Bytes& b, bool gz) {
    std::string p = write_file("fm_tmp", b, gz);
    std::filesystem::rename(p, dir + "/" + name + (gz ? ".gz" : ""));
  };
  put("train-images-idx3-ubyte", cat(header(0x08, {3, 28, 28}), pixels), false);
  put("train-labels-idx1-ubyte", cat(header(0x08, {3}), {0, 9, 4}), true);
  put("t10k-images-idx3-ubyte", cat(header(0x08, {1, 28, 28}), Bytes(784, 255)), true);
  put("t10k-labels-idx1-ubyte", cat(header(0x08, {1}), {5}), false);
  FashionMnist d = load_fashion_mnist(dir);
  EXPECT_EQ(d.x_train.shape(), (Shape{3, 28, 28}));
  EXPECT_EQ(d.x_train.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(d.x_train.data<float>()[255], 1.0f);
  EXPECT_FLOAT_EQ(d.x_train.data<float>()[51], 0.2f);
  EXPECT_EQ(d.y_train.dtype(), DType::u8);
  EXPECT_EQ(d.y_train.data<uint8_t>()[1], 9);
  EXPECT_EQ(d.x_test.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(d.y_test.shape(), (Shape{1}));
}

TEST(IdxFashionMnist, RejectsFilesThatAreNotFashionMnist) {
  std::string dir = temp_path("fm_wrong");
  std::filesystem::create_directories(dir);
  auto put = [&](const std::string& name, const Bytes& b) {
    std::filesystem::rename(write_file("fm_tmp", b), dir + "/" + name);
  };
  put("train-images-idx3-ubyte", cat(header(0x08, {1, 28, 27}), Bytes(28 * 27, 0)));  // wrong image size
  put("train-labels-idx1-ubyte", cat(header(0x08, {1}), {3}));
  put("t10k-images-idx3-ubyte", cat(header(0x08, {2, 28, 28}), Bytes(2 * 784, 0)));
  put("t10k-labels-idx1-ubyte", cat(header(0x08, {2}), {1, 10}));  // 10 is not a class
  try {
    load_fashion_mnist(dir);
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(dir + "/train-images-idx3-ubyte"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(1, 28, 27)"), std::string::npos) << msg;
  }
  put("train-images-idx3-ubyte", cat(header(0x08, {1, 28, 28}), Bytes(784, 0)));
  try {
    load_fashion_mnist(dir);
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(dir + "/t10k-labels-idx1-ubyte"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 10 at byte offset 9"), std::string::npos) << msg;
  }
}

TEST(IdxFashionMnist, RealDataset) {
  std::string dir = default_fashion_mnist_dir();
  if (!std::filesystem::is_directory(dir))
    GTEST_SKIP() << "no Fashion-MNIST at '" << dir << "' (apt-get install dataset-fashion-mnist or set "
                 << "TK_FASHION_MNIST_DIR)";
  FashionMnist d = load_fashion_mnist(dir);
  EXPECT_EQ(d.x_train.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(d.y_train.shape(), (Shape{60000}));
  EXPECT_EQ(d.x_test.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(d.y_test.shape(), (Shape{10000}));
  for (const Tensor* x : {&d.x_train, &d.x_test}) {
    const float* p = x->data<float>();
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < x->numel(); ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);
  }
  for (const Tensor* y : {&d.y_train, &d.y_test}) {
    std::vector<int64_t> counts(10);
    for (int64_t i = 0; i < y->numel(); ++i) {
      ASSERT_LT(y->data<uint8_t>()[i], 10);
      ++counts[y->data<uint8_t>()[i]];
    }
    for (int64_t c : counts) EXPECT_EQ(c, y->numel() / 10);  // Fashion-MNIST is balanced
  }
}

}  // namespace
}  // namespace tk::data
