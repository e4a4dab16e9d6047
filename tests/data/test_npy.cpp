#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "temp_files.h"
#include "trainkit/data/npy.h"
namespace tk::data {
namespace {

using Bytes = std::vector<uint8_t>;

using test::temp_dir;
using test::temp_path;

// Written by tests/fixtures/data/npy/gen_npy_fixtures.py with real NumPy.
std::string fixture(const std::string& name) { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/npy/" + name; }
// float16 files written by tests/fixtures/data/dtype/gen_dtype_fixtures.py (NumPy and ml_dtypes).
std::string dtype_fixture(const std::string& name) {
  return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/dtype/" + name;
}
// The float16 values in those files, row-major (the script's HALF_BITS): zeros, subnormals, normals, +-65504,
// infinities, a quiet NaN, a signalling NaN and a negative NaN with a payload, 0.1 and 1/3.
constexpr uint16_t kHalfBits[16] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0xC000, 0x7BFF,
                                    0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFD55, 0x2E66, 0x3555};

std::vector<uint16_t> half_bits(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::f16);
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f16 && !out.empty()) std::memcpy(out.data(), t.raw(), out.size() * 2);
  return out;
}
const std::vector<uint16_t> kHalf(std::begin(kHalfBits), std::end(kHalfBits));

std::string write_file(const std::string& name, const Bytes& bytes) {
  std::string path = temp_path(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  }
  std::fclose(f);
  return path;
}

Bytes read_raw(const std::string& path) {
  Bytes out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return out;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// An .npy file with the given header text (padded like NumPy's) and data bytes.
Bytes npy(const std::string& header, const Bytes& data = {}, int major = 1, bool pad = true) {
  std::string h = header;
  size_t pre = major == 1 ? 10 : 12;
  if (pad) {
    h.append((64 - (pre + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
  }
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t i = 0; i < pre - 8; ++i) out.push_back(static_cast<uint8_t>(h.size() >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  return cat(out, data);
}

std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

template <typename T>
Bytes le(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

Tensor bools(Shape shape, const std::vector<int>& v) {
  Tensor t(std::move(shape), DType::boolean);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

// Where a zip's member data start, from its local header at `at` (30 bytes, then the name and the extra field).
size_t member_data(const Bytes& zip, size_t at) {
  return at + 30 + (zip[at + 26] | zip[at + 27] << 8) + (zip[at + 28] | zip[at + 29] << 8);
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Runs fn expecting exception E whose one-line message holds `path` and every fragment; returns the message.
template <typename E, typename Fn>
std::string expect_error(Fn fn, const std::string& path, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no exception for '" << path << "'";
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
template <typename E>
std::string expect_npy_error(const std::string& path, const std::vector<std::string>& fragments) {
  return expect_error<E>([&] { load_npy(path); }, path, fragments);
}

// A zip archive of stored (uncompressed) members, as np.savez writes; crc32 from zlib.
Bytes stored_zip(const std::vector<std::pair<std::string, Bytes>>& members) {
  Bytes out, central;
  auto put = [](Bytes& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  for (const auto& [name, data] : members) {
    uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
    size_t offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0x21, 2);
    put(out, crc, 4), put(out, data.size(), 4), put(out, data.size(), 4);
    put(out, name.size(), 2), put(out, 0, 2);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    put(central, 0x02014b50, 4);
    put(central, 20, 2), put(central, 20, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0x21, 2), put(central, crc, 4), put(central, data.size(), 4), put(central, data.size(), 4);
    put(central, name.size(), 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, offset, 4);
    central.insert(central.end(), name.begin(), name.end());
  }
  size_t cd_offset = out.size();
  out = cat(out, central);
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, members.size(), 2), put(out, members.size(), 2);
  put(out, central.size(), 4), put(out, cd_offset, 4), put(out, 0, 2);
  return out;
}

// ---- fixtures written by NumPy ----

TEST(NpyFixtures, Float32) {
  Tensor t = load_npy(fixture("f4_2x3.npy"));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], static_cast<float>(i) * 0.5f - 1) << i;
}

TEST(NpyFixtures, Float64BecomesFloat32) {
  Tensor t = load_npy(fixture("f8_3x2.npy"));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], static_cast<float>(i) / 4 - 0.75f) << i;
}

TEST(NpyFixtures, Float16KeepsItsBits) {
  Tensor t = load_npy(fixture("f2_4.npy"));
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(t.shape(), (Shape{4}));
  uint16_t bits[4];
  std::memcpy(bits, t.raw(), sizeof bits);
  EXPECT_EQ(bits[0], 0x0000);  // 0
  EXPECT_EQ(bits[1], 0x3800);  // 0.5
  EXPECT_EQ(bits[2], 0x3C00);  // 1
  EXPECT_EQ(bits[3], 0x3E00);  // 1.5
}

TEST(NpyFixtures, Float16InBothByteOrdersKeepsEveryBit) {
  for (const char* name : {"f2_4x4.npy", "be_f2_4x4.npy"}) {
    SCOPED_TRACE(name);
    Tensor t = load_npy(dtype_fixture(name));
    EXPECT_EQ(t.shape(), (Shape{4, 4}));
    EXPECT_EQ(half_bits(t), kHalf);  // NaN payloads and subnormals untouched
  }
  Tensor f = load_npy(dtype_fixture("fortran_be_f2.npy"));  // big-endian and Fortran order: swapped, transposed
  EXPECT_EQ(f.shape(), (Shape{2, 4, 2}));
  EXPECT_EQ(half_bits(f), kHalf);
}

TEST(NpzFixtures, Float16Members) {
  auto arrays = load_npz(dtype_fixture("f2.npz"));
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "le");
  EXPECT_EQ(arrays[0].second.shape(), (Shape{16}));
  EXPECT_EQ(half_bits(arrays[0].second), kHalf);
  EXPECT_EQ(arrays[1].first, "be");
  EXPECT_EQ(arrays[1].second.shape(), (Shape{4, 4}));
  EXPECT_EQ(half_bits(arrays[1].second), kHalf);
  EXPECT_EQ(half_bits(load_npz(dtype_fixture("f2_compressed.npz"), "x")), kHalf);  // deflated, big-endian
}

TEST(NpzFixtures, HalfDataForTheCliHoldsTheSameValuesInBothFiles) {
  // tests/fixtures/data/half_data/: x as float16 in x16.npz and widened to float32 in x32.npz, same labels.
  const std::string dir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/half_data/";
  Tensor x16 = load_npz(dir + "x16.npz", "x"), x32 = load_npz(dir + "x32.npz", "x");
  Tensor y16 = load_npz(dir + "x16.npz", "y"), y32 = load_npz(dir + "x32.npz", "y");
  ASSERT_EQ(x16.dtype(), DType::f16);
  ASSERT_EQ(x32.dtype(), DType::f32);
  ASSERT_EQ(x16.shape(), (Shape{512, 20}));
  ASSERT_EQ(x32.shape(), (Shape{512, 20}));
  for (int64_t i = 0; i < x16.numel(); ++i) ASSERT_EQ(x16.data<float16>()[i].to_float(), x32.data<float>()[i]) << i;
  ASSERT_EQ(y16.dtype(), DType::i32);
  ASSERT_EQ(y16.shape(), (Shape{512}));
  EXPECT_EQ(values<int32_t>(y16), values<int32_t>(y32));
  int count[3] = {};
  for (int32_t label : values<int32_t>(y16)) {
    ASSERT_TRUE(label >= 0 && label < 3) << label;
    ++count[label];
  }
  for (int c : count) EXPECT_GT(c, 100);  // every class is well represented
}

TEST(NpyFixtures, MlDtypesBfloat16IsRefusedWithAdvice) {
  // NumPy stores ml_dtypes.bfloat16 as two raw bytes ('<V2'): nothing in the file says they are a bfloat16.
  std::string path = dtype_fixture("bf16.npy");
  expect_npy_error<FormatError>(path, {"unsupported dtype", "'<V2'", "bfloat16", "astype(np.float32)"});
}

TEST(NpyFixtures, IntegerTypes) {
  Tensor i1 = load_npy(fixture("i1_8.npy"));
  EXPECT_EQ(i1.dtype(), DType::i32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(i1.data<int32_t>()[i], (i - 4) * 31);
  Tensor i2 = load_npy(fixture("i2_4.npy"));
  EXPECT_EQ(values<int32_t>(i2), (std::vector<int32_t>{0, -1000, -2000, -3000}));
  Tensor u2 = load_npy(fixture("u2_4.npy"));
  EXPECT_EQ(values<int32_t>(u2), (std::vector<int32_t>{0, 20000, 40000, 60000}));
  Tensor i4 = load_npy(fixture("i4_5.npy"));
  EXPECT_EQ(values<int32_t>(i4), (std::vector<int32_t>{-200000, -100000, 0, 100000, 200000}));
  Tensor u4 = load_npy(fixture("u4_3.npy"));
  EXPECT_EQ(u4.dtype(), DType::i64);
  EXPECT_EQ(values<int64_t>(u4), (std::vector<int64_t>{0, 2000000000, 4000000000}));
  Tensor i8 = load_npy(fixture("i8_4.npy"));
  EXPECT_EQ(i8.dtype(), DType::i64);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(i8.data<int64_t>()[i], i * 1000000000000 - 7);
  Tensor u8 = load_npy(fixture("u8_3.npy"));
  EXPECT_EQ(values<int64_t>(u8), (std::vector<int64_t>{0, 3000000000000000000, 6000000000000000000}));
}

TEST(NpyFixtures, Uint8AndBool) {
  Tensor u = load_npy(fixture("u1_2x2x2.npy"));
  EXPECT_EQ(u.dtype(), DType::u8);
  EXPECT_EQ(u.shape(), (Shape{2, 2, 2}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(u.data<uint8_t>()[i], i * 30 + 5);
  Tensor b = load_npy(fixture("bool_5.npy"));
  EXPECT_EQ(b.dtype(), DType::boolean);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.data<bool>()[i], i % 2 == 0);
}

TEST(NpyFixtures, ScalarAndEmpty) {
  Tensor s = load_npy(fixture("scalar_f4.npy"));
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.data<float>()[0], 3.5f);
  Tensor e = load_npy(fixture("empty_0x3.npy"));
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_EQ(e.numel(), 0);
}

TEST(NpyFixtures, FormatVersions2And3) {
  Tensor v2 = load_npy(fixture("v2_i4_3x2.npy"));
  EXPECT_EQ(v2.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int32_t>(v2), (std::vector<int32_t>{-3, -2, -1, 0, 1, 2}));
  Tensor v3 = load_npy(fixture("v3_f4_4.npy"));
  EXPECT_EQ(values<float>(v3), (std::vector<float>{0.25f, 1.25f, 2.25f, 3.25f}));
}

TEST(NpyFixtures, BigEndianIsSwapped) {
  Tensor f = load_npy(fixture("be_f4_2x3.npy"));
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.data<float>()[i], static_cast<float>(i) * 0.5f - 1) << i;
  Tensor i = load_npy(fixture("be_i8_3.npy"));
  EXPECT_EQ(values<int64_t>(i), (std::vector<int64_t>{-7, 1000000000000 - 7, 2000000000000 - 7}));
}

TEST(NpyHeader, BigEndianOfEveryWidth) {
  // Widths the tensor keeps are swapped in place, the others while converting; Fortran order after either.
  struct Case {
    const char* descr;
    Bytes data;  // big-endian
    DType dtype;
    Bytes want;  // the tensor's little-endian bytes
  };
  const std::vector<Case> cases = {
      {">f2", {0x3C, 0x00, 0x7C, 0x01, 0xFD, 0x55}, DType::f16, {0x00, 0x3C, 0x01, 0x7C, 0x55, 0xFD}},
      {">f4",
       {0x3F, 0x80, 0, 0, 0xC0, 0, 0, 0, 0x7F, 0x80, 0, 1},
       DType::f32,
       {0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0, 1, 0, 0x80, 0x7F}},
      {">i4",
       {0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE, 0x12, 0x34, 0x56, 0x78},
       DType::i32,
       le<int32_t>({1, -2, 0x12345678})},
      {">i2", {0, 1, 0xFF, 0xFE, 0x80, 0}, DType::i32, le<int32_t>({1, -2, -32768})},
      {">u2", {0, 1, 0xFF, 0xFE, 0x80, 0}, DType::i32, le<int32_t>({1, 65534, 32768})},
      {">u4",
       {0, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFE, 0x80, 0, 0, 0},
       DType::i64,
       le<int64_t>({1, 4294967294, 2147483648})},
      {">f8",
       {0x3F, 0xF8, 0, 0, 0, 0, 0, 0, 0xC0, 0, 0, 0, 0, 0, 0, 0, 0x3F, 0xD0, 0, 0, 0, 0, 0, 0},
       DType::f32,
       le<float>({1.5f, -2, 0.25f})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.descr);
    for (bool fortran : {false, true}) {
      // Fortran order of shape (1, 3) is the same bytes as C order: the swap and the transpose both run.
      std::string path =
          write_file("be.npy", npy(dict(c.descr, fortran ? "(1, 3)" : "(3,)", fortran ? "True" : "False"), c.data));
      Tensor t = load_npy(path);
      EXPECT_EQ(t.dtype(), c.dtype);
      EXPECT_EQ(t.numel(), 3);
      ASSERT_EQ(t.nbytes(), c.want.size());
      EXPECT_EQ(Bytes(static_cast<const uint8_t*>(t.raw()), static_cast<const uint8_t*>(t.raw()) + t.nbytes()), c.want);
    }
  }
}

TEST(NpyFixtures, FortranOrderIsTransposedToRowMajor) {
  Tensor t = load_npy(fixture("fortran_i4_2x3x4.npy"));
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(t.data<int32_t>()[i], i);  // np.arange(24).reshape(2, 3, 4)
  Tensor f = load_npy(fixture("fortran_f8_3x2.npy"));
  EXPECT_EQ(f.shape(), (Shape{3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f.data<float>()[i], static_cast<float>(i) / 4 - 0.75f) << i;
}

TEST(NpzFixtures, SavezStoredMembersInArchiveOrder) {
  auto arrays = load_npz(fixture("savez.npz"));
  ASSERT_EQ(arrays.size(), 4u);
  EXPECT_EQ(arrays[0].first, "x");
  EXPECT_EQ(arrays[1].first, "y");
  EXPECT_EQ(arrays[2].first, "flag");
  EXPECT_EQ(arrays[3].first, "arr_0");
  const Tensor& x = arrays[0].second;
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x.data<float>()[i], static_cast<float>(i) * 0.5f - 1);
  EXPECT_EQ(values<int64_t>(arrays[1].second), (std::vector<int64_t>{-7, 1000000000000 - 7, 2000000000000 - 7}));
  EXPECT_EQ(arrays[2].second.shape(), Shape{});
  EXPECT_EQ(arrays[2].second.data<bool>()[0], true);
  EXPECT_EQ(values<int32_t>(arrays[3].second), (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST(NpzFixtures, SavezCompressedDeflatedMembers) {
  auto arrays = load_npz(fixture("savez_compressed.npz"));
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "features");
  const Tensor& f = arrays[0].second;
  EXPECT_EQ(f.shape(), (Shape{10, 10}));
  EXPECT_EQ(f.dtype(), DType::f32);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(f.data<float>()[i], static_cast<float>(i) / 8) << i;
  EXPECT_EQ(arrays[1].first, "labels");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(arrays[1].second.data<uint8_t>()[i], i % 3);
}

TEST(NpzFixtures, OneMemberByKey) {
  Tensor labels = load_npz(fixture("savez_compressed.npz"), "labels");
  EXPECT_EQ(labels.shape(), (Shape{10}));
  EXPECT_EQ(labels.data<uint8_t>()[5], 2);
  EXPECT_EQ(load_npz(fixture("savez.npz"), "y.npy").data<int64_t>()[0], -7);  // the member's own name works too
}

// ---- headers this reader must accept ----

TEST(NpyHeader, AcceptsEveryWayPythonCanWriteTheDict) {
  Bytes data = le<float>({1, 2, 3, 4, 5, 6});
  for (const std::string& header : {
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"),
           std::string("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}"),  // double quotes
           std::string("{'shape':(2,3),'fortran_order':False,'descr':'<f4'}"),                // any key order
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }"),      // Python 2 longs
           std::string("\t{ 'descr' :\n'<f4' ,\r\n'fortran_order': False, 'shape': ( 2 , 3 , ) }  "),
           std::string("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }"),  // native order
           std::string("{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3), }"),
       }) {
    SCOPED_TRACE(header);
    Tensor t = load_npy(write_file("header_ok.npy", npy(header, data)));
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(values<float>(t), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  }
  // Unpadded header, and a version 2.0 file written by hand.
  EXPECT_EQ(load_npy(write_file("unpadded.npy", npy(dict("<f4", "(6,)"), data, 1, false))).numel(), 6);
  EXPECT_EQ(load_npy(write_file("v2.npy", npy(dict("<f4", "(3, 2)"), data, 2))).shape(), (Shape{3, 2}));
}

TEST(NpyHeader, BoolBytesAreNormalised) {
  Tensor t = load_npy(write_file("bool_bytes.npy", npy(dict("|b1", "(3,)"), {0, 1, 7})));
  EXPECT_EQ(t.dtype(), DType::boolean);
  const auto* bytes = static_cast<const uint8_t*>(t.raw());  // a C++ bool must hold 0 or 1
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 1);
  EXPECT_EQ(bytes[2], 1);
}

// ---- save_npy ----

TEST(NpySave, MatchesNumPyByteForByte) {
  // np.save's own output for the same arrays: the header text, its padding and the data all agree.
  std::vector<float> f(6);
  for (int i = 0; i < 6; ++i) f[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f - 1;
  std::vector<int64_t> i8 = {-7, 1000000000000 - 7, 2000000000000 - 7, 3000000000000 - 7};
  std::vector<uint8_t> u1(8);
  for (int i = 0; i < 8; ++i) u1[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 30 + 5);
  struct Case {
    const char* fixture;
    Tensor tensor;
  };
  Tensor half(Shape{4, 4}, DType::f16);
  std::memcpy(half.raw(), kHalfBits, sizeof kHalfBits);
  for (const Case& c : std::vector<Case>{{"f4_2x3.npy", Tensor::from_vector<float>({2, 3}, f)},
                                         {"i8_4.npy", Tensor::from_vector<int64_t>({4}, i8)},
                                         {"u1_2x2x2.npy", Tensor::from_vector<uint8_t>({2, 2, 2}, u1)},
                                         {"bool_5.npy", bools({5}, {1, 0, 1, 0, 1})},
                                         {"scalar_f4.npy", Tensor::from_vector<float>({}, {3.5f})},
                                         {"empty_0x3.npy", Tensor::zeros({0, 3})},
                                         {"f2_4x4.npy", half}}) {  // '<f2', NaN payloads included
    SCOPED_TRACE(c.fixture);
    std::string path = temp_path(std::string("saved_") + c.fixture);
    save_npy(path, c.tensor);
    const std::string name = c.fixture;
    EXPECT_EQ(read_raw(path), read_raw(name == "f2_4x4.npy" ? dtype_fixture(name) : fixture(name)));
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST(NpySave, RoundTripsEveryDtype) {
  std::vector<Tensor> tensors = {Tensor::from_vector<float>({2, 2}, {1.5f, -2, 0, 1e30f}),
                                 Tensor::from_vector<int32_t>({3}, {INT32_MIN, 0, INT32_MAX}),
                                 Tensor::from_vector<int64_t>({1, 2}, {INT64_MIN, INT64_MAX}),
                                 Tensor::from_vector<uint8_t>({2, 1, 2}, {0, 1, 254, 255}),
                                 bools({2}, {1, 0}),
                                 Tensor(Shape{3}, DType::f16)};
  uint16_t half[3] = {0x3C00, 0xC000, 0x7BFF};
  std::memcpy(tensors.back().raw(), half, sizeof half);
  for (const Tensor& t : tensors) {
    SCOPED_TRACE(std::string(dtype_name(t.dtype())));
    std::string path = temp_path("round_trip.npy");
    save_npy(path, t);
    Bytes raw = read_raw(path);
    ASSERT_GE(raw.size(), 64u);
    EXPECT_EQ((raw.size() - t.nbytes()) % 64, 0u);  // data start on a 64-byte boundary, as in NumPy
    Tensor back = load_npy(path);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0);
  }
}

TEST(NpySave, ReplacesAnExistingFileWhole) {
  std::string path = temp_path("replace.npy");
  save_npy(path, Tensor::zeros({100}));
  save_npy(path, Tensor::from_vector<int32_t>({2}, {4, 5}));
  EXPECT_EQ(values<int32_t>(load_npy(path)), (std::vector<int32_t>{4, 5}));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(NpySave, Errors) {
  std::string missing_dir = temp_path("no_such_dir/x.npy");
  expect_error<IoError>([&] { save_npy(missing_dir, Tensor::zeros({2})); }, missing_dir,
                        {"cannot create", "x.npy.tmp", "No such file or directory"});
  std::string path = temp_path("bf16.npy");
  expect_error<Unsupported>([&] { save_npy(path, Tensor(Shape{2}, DType::bf16)); }, path,
                            {"bfloat16", "no standard NumPy dtype", "float32"});
  expect_error<InvalidArgument>([&] { save_npy(path, Tensor()); }, path, {"undefined"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// ---- save_npz ----

TEST(NpzSave, RoundTripsEveryMemberInOrder) {
  std::vector<std::pair<std::string, Tensor>> arrays = {
      {"logits", Tensor::from_vector<float>({2, 3}, {1.5f, -2, 0, 1e30f, -0.f, 7})},
      {"ids", Tensor::from_vector<int64_t>({2}, {INT64_MIN, INT64_MAX})},
      {"empty", Tensor::zeros({0, 4})},
      {"flag", bools({}, {1})}};
  const std::string path = temp_path("saved.npz");
  save_npz(path, arrays);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto back = load_npz(path);
  ASSERT_EQ(back.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    SCOPED_TRACE(arrays[i].first);
    EXPECT_EQ(back[i].first, arrays[i].first);
    EXPECT_EQ(back[i].second.dtype(), arrays[i].second.dtype());
    EXPECT_EQ(back[i].second.shape(), arrays[i].second.shape());
    EXPECT_EQ(std::memcmp(back[i].second.raw(), arrays[i].second.raw(), arrays[i].second.nbytes()), 0);
  }
  // Each member holds exactly what save_npy writes for the same array (np.save's bytes, checked above).
  const std::string one = temp_path("one.npy");
  save_npy(one, arrays[0].second);
  const Bytes npy_bytes = read_raw(one), zip_bytes = read_raw(path);
  EXPECT_NE(std::search(zip_bytes.begin(), zip_bytes.end(), npy_bytes.begin(), npy_bytes.end()), zip_bytes.end())
      << "the member is stored uncompressed, byte for byte";
}

TEST(NpzSave, ReplacesAnExistingFileWhole) {
  const std::string path = temp_path("replace.npz");
  save_npz(path, {{"a", Tensor::zeros({100})}, {"b", Tensor::zeros({3})}});
  save_npz(path, {{"c", Tensor::from_vector<int32_t>({2}, {4, 5})}});
  auto back = load_npz(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].first, "c");
  EXPECT_EQ(values<int32_t>(back[0].second), (std::vector<int32_t>{4, 5}));
}

TEST(NpzSave, Errors) {
  const std::string path = temp_path("bad.npz");
  expect_error<InvalidArgument>([&] { save_npz(path, {}); }, path, {"no arrays"});
  expect_error<InvalidArgument>(
      [&] {
        save_npz(path, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}});
      },
      path, {"'a'", "given twice"});
  expect_error<InvalidArgument>([&] { save_npz(path, {{"a/b", Tensor::zeros({1})}}); }, path, {"'a/b'", "'/'"});
  expect_error<Unsupported>(
      [&] {
        save_npz(path, {{"h", Tensor(Shape{2}, DType::bf16)}});
      },
      path, {"'h'", "bfloat16", "float32"});
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::string missing_dir = temp_path("no_such_dir/x.npz");
  expect_error<IoError>(
      [&] {
        save_npz(missing_dir, {{"a", Tensor::zeros({2})}});
      },
      missing_dir, {"cannot write", "x.npz.tmp", "No such file or directory"});
}

// ---- bad .npy files ----

TEST(NpyErrors, MissingFileAndDirectory) {
  expect_npy_error<IoError>(temp_path("does_not_exist.npy"), {"cannot open", "No such file or directory"});
  std::string dir = temp_path("a_directory");
  std::filesystem::create_directories(dir);
  expect_npy_error<IoError>(dir, {"is a directory"});
}

TEST(NpyErrors, TruncatedAtEveryStage) {
  Bytes full = read_raw(fixture("f4_2x3.npy"));  // 10-byte preamble, 118-byte header, 24 data bytes
  ASSERT_EQ(full.size(), 152u);
  struct Cut {
    size_t at;
    std::vector<std::string> fragments;
  };
  for (const Cut& c : std::vector<Cut>{
           {0, {"truncated header at byte offset 0", "the file is empty"}},
           {4, {"truncated header at byte offset 4", "holds 4"}},
           {9, {"truncated header at byte offset 9", "holds 9"}},
           {10, {"truncated header at byte offset 10", "the header claims 118 bytes", "only 0 follow"}},
           {60, {"truncated header at byte offset 60", "only 50 follow"}},
           {128, {"truncated data at byte offset 128", "shape (2, 3) of '<f4' needs 24 data bytes, but only 0"}},
           {140, {"truncated data at byte offset 140", "needs 24 data bytes, but only 12"}},
           {151, {"truncated data at byte offset 151", "but only 23"}}}) {
    SCOPED_TRACE(c.at);
    std::string path = write_file("cut.npy", Bytes(full.begin(), full.begin() + static_cast<long>(c.at)));
    expect_npy_error<FormatError>(path, c.fragments);
  }
}

TEST(NpyErrors, BadMagic) {
  expect_npy_error<FormatError>(write_file("text.npy", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}),
                                {"bad magic at byte offset 0", "68 65 6c 6c 6f 20", "not a .npy file"});
  expect_npy_error<FormatError>(write_file("zip.npy", read_raw(fixture("savez.npz"))),
                                {"bad magic at byte offset 0", "zip archive", "load_npz"});
  Bytes almost = read_raw(fixture("f4_2x3.npy"));
  almost[3] = 'X';
  expect_npy_error<FormatError>(write_file("almost.npy", almost), {"bad magic at byte offset 3"});
}

TEST(NpyErrors, UnsupportedVersionAndHugeHeader) {
  Bytes v4 = npy(dict("<f4", "(1,)"), le<float>({1}));
  v4[6] = 4;
  expect_npy_error<FormatError>(write_file("v4.npy", v4), {"unsupported format version at byte offset 6", "4.0"});
  Bytes huge = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xFF, 0xFF, 0xFF, 0x7F, '{'};
  expect_npy_error<FormatError>(write_file("huge_header.npy", huge),
                                {"header too long at byte offset 8", "2147483647 bytes"});
  Bytes v2_cut = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0x10, 0};
  expect_npy_error<FormatError>(write_file("v2_cut.npy", v2_cut), {"truncated header at byte offset 10"});
}

TEST(NpyErrors, GarbageHeaders) {
  struct Case {
    std::string header;
    std::string marker;  // the error's offset is where this first occurs in the header (empty: not checked)
    std::string fragment;
    std::string problem = "bad header";
  };
  const std::string ok_tail = "'fortran_order': False, 'shape': (2, 3), }";
  for (const Case& c : std::vector<Case>{
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ", "",
            "the header ends where a value should start"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "", "expected ',' or '}', found end of header"},
           {"{'descr': '<f4', 'fortran_order': False}", "{", "the key 'shape' is missing"},
           {"{'descr': '<f4', " + ok_tail.substr(0, ok_tail.size() - 1) + "'extra': 1}", "'extra'", "unexpected key"},
           {"{'descr': '<f4', 'descr': '<f4', " + ok_tail, "'descr': '<f4', " + ok_tail, "appears twice"},
           {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "0,", "not True or False"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3)}", ".0", "in a number"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3)}", "-1", "is -1"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "[", "not a tuple"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "6", "an integer, not a tuple"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 3)}", "9999", "too large"},
           {"{'descr': '<c8', " + ok_tail, "'<c8'", "complex", "unsupported dtype"},
           {"{'descr': '|O', " + ok_tail, "'|O'", "pickled", "unsupported dtype"},
           {"{'descr': '<U5', " + ok_tail, "'<U5'", "a string type", "unsupported dtype"},
           {"{'descr': '<f3', " + ok_tail, "'<f3'", "not a dtype this reader knows", "unsupported dtype"},
           {"{'descr': [('a', '<f4')], " + ok_tail, "[", "structured array", "unsupported dtype"},
           {"{'descr': 4, " + ok_tail, "4", "not a string"},
           {"__import__('os').system('echo hi')", "__import__", "unexpected name '__import__'"},
           {"{'descr': '<f4', " + ok_tail + " junk", "junk", "after the header's value"},
           {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", "'fortran_order'", "expected ',' or '}'"},
           {"{'descr: '<f4', " + ok_tail, "", "expected ':'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 'open}", "", "unterminated string"},
           {"{1: '<f4', " + ok_tail, "1", "keys must be strings"},
           {std::string(100, '(') + std::string(100, ')'), "", "nested more than 32 deep"},
           {"", "", "the header ends where a value should start"},
           {"[]", "[", "not a dict"},
       }) {
    SCOPED_TRACE(c.header);
    std::string path = write_file("garbage.npy", npy(c.header, le<float>({1, 2, 3, 4, 5, 6})));
    std::vector<std::string> fragments = {c.problem + " at byte offset", c.fragment};
    if (!c.marker.empty())
      fragments.push_back(c.problem + " at byte offset " + std::to_string(10 + c.header.find(c.marker)));
    expect_npy_error<FormatError>(path, fragments);
  }
}

TEST(NpyErrors, ShapeAndLengthMismatch) {
  std::string header = dict("<f4", "(2, 3)");
  std::string fewer = write_file("fewer.npy", npy(header, Bytes(20, 0)));
  expect_npy_error<FormatError>(fewer, {"truncated data at byte offset 148", "needs 24 data bytes, but only 20"});
  std::string more = write_file("more.npy", npy(header, Bytes(28, 0)));
  expect_npy_error<FormatError>(more, {"trailing bytes at byte offset 152", "needs 24 data bytes, but 28 follow"});
}

TEST(NpyErrors, HugeClaimsAreRejectedBeforeAllocating) {
  // Memory must follow the bytes present, never the header's claim.
  std::string big = write_file("claims_32gib.npy", npy(dict("<f8", "(65536, 65536)"), Bytes(10, 0)));
  expect_npy_error<FormatError>(
      big, {"truncated data at byte offset 138", "needs 34359738368 data bytes", "only 10 follow"});
  std::string overflow =
      write_file("overflow.npy", npy(dict("<f8", "(4294967296, 4294967296, 4294967296)"), Bytes(10, 0)));
  expect_npy_error<FormatError>(overflow, {"array too large at byte offset 10", "more than 2^63 bytes"});
  // NumPy refuses these too: a zero dimension does not excuse the others.
  std::string zero = write_file("zero_dim.npy", npy(dict("<f4", "(0, 1099511627776, 1099511627776)")));
  expect_npy_error<FormatError>(zero, {"array too large"});
  EXPECT_EQ(load_npy(write_file("zero_ok.npy", npy(dict("<f4", "(1048576, 0, 1048576)")))).numel(), 0);
  std::string rank = "(";
  for (int i = 0; i < 65; ++i) rank += "1, ";
  expect_npy_error<FormatError>(write_file("rank65.npy", npy(dict("<f4", rank + ")"), le<float>({1}))),
                                {"65 dimensions, more than 64"});
}

TEST(NpyErrors, Uint64AboveInt64Max) {
  std::string path = write_file("u8_big.npy", npy(dict("<u8", "(2,)"), le<uint64_t>({5, uint64_t{1} << 63})));
  expect_npy_error<FormatError>(path, {"uint64 value out of range at byte offset 136", "9223372036854775808"});
}

TEST(NpyErrors, RandomBytesAfterTheMagic) {
  for (unsigned seed = 0; seed < 50; ++seed) {
    std::mt19937 rng(seed);
    Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 200, 0};
    for (int i = 0; i < 300; ++i) b.push_back(static_cast<uint8_t>(rng()));
    SCOPED_TRACE(seed);
    expect_npy_error<FormatError>(write_file("random.npy", b), {"at byte offset"});
  }
}

// ---- bad .npz files ----

TEST(NpzErrors, MissingKeyListsTheKeys) {
  std::string path = fixture("savez.npz");
  expect_error<InvalidArgument>([&] { load_npz(path, "z"); }, path,
                                {"no array named 'z'", "'x', 'y', 'flag', 'arr_0'"});
}

TEST(NpzErrors, MissingFileAndNotAZip) {
  std::string missing = temp_path("missing.npz");
  expect_error<IoError>([&] { load_npz(missing); }, missing, {"cannot open", "No such file or directory"});
  std::string text = write_file("text.npz", {'n', 'o', 't', ' ', 'a', ' ', 'z', 'i', 'p'});
  expect_error<FormatError>([&] { load_npz(text); }, text, {"not a valid zip archive", "libzip: Not a zip archive"});
  std::string npy_file = write_file("plain.npz", read_raw(fixture("f4_2x3.npy")));
  expect_error<FormatError>([&] { load_npz(npy_file); }, npy_file, {"use load_npy"});
  std::string empty = write_file("empty.npz", {});
  expect_error<FormatError>([&] { load_npz(empty); }, empty, {"byte offset 0", "empty"});
}

TEST(NpzErrors, CorruptArchives) {
  Bytes zip = read_raw(fixture("savez.npz"));
  // Cut off the central directory (the end of the file): the archive cannot be opened at all.
  std::string cut = write_file("cut.npz", Bytes(zip.begin(), zip.begin() + static_cast<long>(zip.size() - 30)));
  expect_error<FormatError>([&] { load_npz(cut); }, cut, {"not a valid zip archive: libzip:"});
  // A flipped data byte inside the first member: its CRC no longer matches.
  Bytes flipped = zip;
  flipped[member_data(zip, 0) + 128 + 2] ^= 0x40;  // the .npy header is 128 bytes, then x's data
  std::string crc = write_file("crc.npz", flipped);
  expect_error<FormatError>([&] { load_npz(crc); }, crc, {"member 'x.npy'", "libzip: CRC error"});
  // The other members are still readable by key.
  EXPECT_EQ(load_npz(crc, "y").numel(), 3);
}

TEST(NpzErrors, CorruptDeflateStream) {
  Bytes zip = read_raw(fixture("savez_compressed.npz"));
  Bytes bad = zip;
  for (size_t i = member_data(zip, 0) + 10; i < member_data(zip, 0) + 50; ++i) bad[i] = 0xFF;  // features.npy
  std::string path = write_file("bad_deflate.npz", bad);
  expect_error<FormatError>([&] { load_npz(path); }, path, {"member 'features.npy'", "libzip:"});
}

TEST(NpzErrors, MemberProblemsNameTheMember) {
  Bytes good = npy(dict("<f4", "(2,)"), le<float>({1, 2}));
  Bytes cut(good.begin(), good.end() - 3);
  std::string path = write_file("member_cut.npz", stored_zip({{"a.npy", good}, {"b.npy", cut}}));
  expect_error<FormatError>([&] { load_npz(path); }, path,
                            {"member 'b.npy': truncated data at byte offset 133 of the member", "only 5 follow"});
  EXPECT_EQ(values<float>(load_npz(path, "a")), (std::vector<float>{1, 2}));

  std::string other = write_file("not_npy.npz", stored_zip({{"a.npy", good}, {"notes.txt", {'h', 'i'}}}));
  expect_error<FormatError>([&] { load_npz(other); }, other, {"member 'notes.txt' is not a .npy array"});
  EXPECT_EQ(load_npz(other, "a").numel(), 2);
}

TEST(NpzErrors, EmptyArchive) {
  std::string path = write_file("empty_archive.npz", stored_zip({}));  // what np.savez() with no arrays writes
  EXPECT_TRUE(load_npz(path).empty());
  expect_error<InvalidArgument>([&] { load_npz(path, "x"); }, path, {"holds no arrays"});
}

}  // namespace
}  // namespace tk::data
