// tk::float16 / tk::bfloat16 (core/half.h) against NumPy and ml_dtypes, bit for bit, NaNs included: the
// reference conversions in tests/fixtures/data/dtype/conversions.npz (written by gen_dtype_fixtures.py
// there), read with the NPY reader.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trainkit/core/half.h"
#include "trainkit/data/npy.h"

namespace tk {
namespace {

// Conversions of a few values, checked at compile time (the functions are constexpr).
static_assert(float16::from_float(1.0f).bits == 0x3C00 && float16::from_float(-2.0f).bits == 0xC000);
static_assert(float16::from_float(65520.0f).bits == 0x7C00);  // the tie above 65504 rounds to Inf
static_assert(float16::from_bits(0x0001).to_float() == 0x1p-24f);
static_assert(bfloat16::from_float(1.0f).bits == 0x3F80 && bfloat16::from_bits(0xC049).to_float() == -3.140625f);

constexpr size_t kPatterns = 65536;

std::string fixture() { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/dtype/conversions.npz"; }

template <typename Bits>
std::vector<Bits> bits_of(const Tensor& t, DType expected, const char* key) {
  EXPECT_EQ(t.dtype(), expected) << key;
  if (t.dtype() != expected) return {};
  std::vector<Bits> out(static_cast<size_t>(t.numel()));
  if (expected == DType::i32) {  // '<u2' arrays load as int32
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<Bits>(t.data<int32_t>()[i]);
  } else {
    EXPECT_EQ(dtype_size(expected), sizeof(Bits)) << key;
    std::memcpy(out.data(), t.raw(), out.size() * sizeof(Bits));
  }
  return out;
}

struct Reference {
  std::vector<uint32_t> f32;                      // (n,) float32 inputs, as bits
  std::vector<uint16_t> f16, bf16;                // (n,) NumPy's astype(float16), ml_dtypes' bfloat16
  std::vector<uint32_t> f16_to_f32, bf16_to_f32;  // (65536,) every 16-bit pattern widened
  std::vector<uint16_t> f16_back, bf16_back;      // (65536,) ... and narrowed again
};

const Reference& reference() {
  static const Reference r = [] {
    Reference r;
    auto get = [](const char* key) { return data::load_npz(fixture(), key); };
    r.f32 = bits_of<uint32_t>(get("f32"), DType::f32, "f32");
    r.f16 = bits_of<uint16_t>(get("f16"), DType::f16, "f16");
    r.bf16 = bits_of<uint16_t>(get("bf16"), DType::i32, "bf16");
    r.f16_to_f32 = bits_of<uint32_t>(get("f16_to_f32"), DType::f32, "f16_to_f32");
    r.bf16_to_f32 = bits_of<uint32_t>(get("bf16_to_f32"), DType::f32, "bf16_to_f32");
    r.f16_back = bits_of<uint16_t>(get("f16_back"), DType::f16, "f16_back");
    r.bf16_back = bits_of<uint16_t>(get("bf16_back"), DType::i32, "bf16_back");
    return r;
  }();
  return r;
}

std::string hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

// Compares got[i] with want[i]; the message lists the first mismatches with their inputs, in hex.
template <typename In, typename Out>
void expect_same_bits(const char* what, const std::vector<In>& in, const std::vector<Out>& want,
                      const std::vector<Out>& got) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(in.size(), want.size()) << what;
  size_t bad = 0;
  std::string shown;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (++bad <= 20)
      shown += "\n  #" + std::to_string(i) + " " + hex(in[i], 2 * sizeof(In)) + ": expected " +
               hex(want[i], 2 * sizeof(Out)) + ", got " + hex(got[i], 2 * sizeof(Out));
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " differ (input: expected, got)" << shown;
}

std::vector<uint16_t> every_pattern() {
  std::vector<uint16_t> p(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) p[i] = static_cast<uint16_t>(i);
  return p;
}

std::vector<float> floats(const std::vector<uint32_t>& bits) {
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * sizeof(float));
  return f;
}

TEST(HalfFixtures, HoldWhatTheGeneratorWrote) {
  const Reference& r = reference();
  EXPECT_GT(r.f32.size(), 10000u);
  EXPECT_EQ(r.f16.size(), r.f32.size());
  EXPECT_EQ(r.bf16.size(), r.f32.size());
  for (const auto* v : {&r.f16_to_f32, &r.bf16_to_f32}) EXPECT_EQ(v->size(), kPatterns);
  for (const auto* v : {&r.f16_back, &r.bf16_back}) EXPECT_EQ(v->size(), kPatterns);
  // The first inputs are +0 and -0; float16 1.0 widens to 0x3f800000.
  ASSERT_GE(r.f32.size(), 2u);
  EXPECT_EQ(r.f32[0], 0x00000000u);
  EXPECT_EQ(r.f32[1], 0x80000000u);
  ASSERT_EQ(r.f16_to_f32.size(), kPatterns);
  EXPECT_EQ(r.f16_to_f32[0x3C00], 0x3F800000u);
}

TEST(Float16, FromFloatMatchesNumPy) {
  const Reference& r = reference();
  std::vector<uint16_t> got(r.f32.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = float16::from_float(std::bit_cast<float>(r.f32[i])).bits;
  expect_same_bits("float16::from_float", r.f32, r.f16, got);
}

TEST(Float16, BulkFromFloatMatchesNumPy) {
  const Reference& r = reference();
  std::vector<float> in = floats(r.f32);
  std::vector<float16> out(in.size());
  convert_f32_to_f16(in.data(), out.data(), in.size());
  std::vector<uint16_t> got(out.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = out[i].bits;
  expect_same_bits("convert_f32_to_f16", r.f32, r.f16, got);
}

TEST(Float16, ToFloatOfEveryPatternMatchesNumPy) {
  const Reference& r = reference();
  const std::vector<uint16_t> patterns = every_pattern();
  std::vector<uint32_t> got(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) got[i] = std::bit_cast<uint32_t>(float16::from_bits(patterns[i]).to_float());
  expect_same_bits("float16::to_float", patterns, r.f16_to_f32, got);

  std::vector<float16> in(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) in[i] = float16::from_bits(patterns[i]);
  std::vector<float> out(kPatterns);
  convert_f16_to_f32(in.data(), out.data(), kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) got[i] = std::bit_cast<uint32_t>(out[i]);
  expect_same_bits("convert_f16_to_f32", patterns, r.f16_to_f32, got);
}

TEST(Float16, EveryPatternSurvivesARoundTripThroughFloat32) {
  const Reference& r = reference();
  const std::vector<uint16_t> patterns = every_pattern();
  EXPECT_EQ(r.f16_back, patterns);  // NumPy keeps every float16, NaN payloads included
  std::vector<uint16_t> got(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) got[i] = float16::from_float(float16::from_bits(patterns[i]).to_float()).bits;
  expect_same_bits("float16 -> float32 -> float16", patterns, r.f16_back, got);
}

TEST(BFloat16, FromFloatMatchesMlDtypes) {
  const Reference& r = reference();
  std::vector<uint16_t> got(r.f32.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = bfloat16::from_float(std::bit_cast<float>(r.f32[i])).bits;
  expect_same_bits("bfloat16::from_float", r.f32, r.bf16, got);
}

TEST(BFloat16, BulkFromFloatMatchesMlDtypes) {
  const Reference& r = reference();
  std::vector<float> in = floats(r.f32);
  std::vector<bfloat16> out(in.size());
  convert_f32_to_bf16(in.data(), out.data(), in.size());
  std::vector<uint16_t> got(out.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = out[i].bits;
  expect_same_bits("convert_f32_to_bf16", r.f32, r.bf16, got);
}

TEST(BFloat16, ToFloatOfEveryPatternMatchesMlDtypes) {
  const Reference& r = reference();
  const std::vector<uint16_t> patterns = every_pattern();
  std::vector<uint32_t> got(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) got[i] = std::bit_cast<uint32_t>(bfloat16::from_bits(patterns[i]).to_float());
  expect_same_bits("bfloat16::to_float", patterns, r.bf16_to_f32, got);

  std::vector<bfloat16> in(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) in[i] = bfloat16::from_bits(patterns[i]);
  std::vector<float> out(kPatterns);
  convert_bf16_to_f32(in.data(), out.data(), kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) got[i] = std::bit_cast<uint32_t>(out[i]);
  expect_same_bits("convert_bf16_to_f32", patterns, r.bf16_to_f32, got);
}

TEST(BFloat16, EveryPatternRoundTripsLikeMlDtypes) {
  const Reference& r = reference();
  const std::vector<uint16_t> patterns = every_pattern();
  std::vector<uint16_t> got(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i)
    got[i] = bfloat16::from_float(bfloat16::from_bits(patterns[i]).to_float()).bits;
  // Every non-NaN comes back unchanged; ml_dtypes turns each NaN into the quiet NaN of its sign.
  expect_same_bits("bfloat16 -> float32 -> bfloat16", patterns, r.bf16_back, got);
}

}  // namespace
}  // namespace tk
