// Cast in the op harness: between every two of the 7 dtypes, on every registered backend (the cpu must have
// all 49), equal to Tensor::to byte for byte — rounding to nearest even, overflow to Inf, NaN payloads,
// subnormals, truncation and saturation of integers, bool — and round trips through 16 bits equal rounding.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "op_harness.h"

namespace tk::graph::harness {
namespace {

constexpr int64_t kElements = 40001;  // past the cpu's parallel grain (32k), odd

float bits_f32(uint32_t b) { return std::bit_cast<float>(b); }

std::vector<float> f32_specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,
          -0.0f,
          1.0f,
          -1.0f,
          0.5f,
          -0.5f,
          1.5f,
          2.5f,
          -2.5f,
          -0.9f,
          0.1f,
          3.14159265f,
          127.9f,
          128.0f,
          255.0f,
          255.5f,
          256.0f,
          300.0f,
          -129.0f,
          65504.0f,
          65519.99f,
          65520.0f,
          -65520.0f,
          1e5f,
          1e10f,
          -1e10f,
          3.0e38f,
          FLT_MAX,
          -FLT_MAX,  // float16 overflow
          2147483520.0f,
          2147483648.0f,
          -2147483648.0f,
          -2147483904.0f,
          9.3e18f,
          -9.3e18f,  // int saturation
          1e-8f,
          3e-8f,
          6e-8f,
          std::ldexp(1.0f, -24),
          std::ldexp(1.0f, -25),
          std::ldexp(3.0f, -26),  // f16 subnormals
          6.1e-5f,
          FLT_MIN,
          1e-40f,
          -1e-40f,  // f32 subnormals
          1.0f + std::ldexp(1.0f, -11),
          1.0f + 3 * std::ldexp(1.0f, -11),  // float16 ties
          1.0f + std::ldexp(1.0f, -8),
          1.0f + 3 * std::ldexp(1.0f, -8),  // bfloat16 ties
          1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),
          inf,
          -inf,
          bits_f32(0x7fc00000u),
          bits_f32(0xffc00000u),
          bits_f32(0x7f800001u),
          bits_f32(0x7fc00001u),
          bits_f32(0x7fffffffu),
          bits_f32(0xff812345u),
          bits_f32(0x7f7fffffu),
          bits_f32(0x477fe000u) /* 65504 + half ulp */};
}

template <typename T>
void append(std::vector<unsigned char>& bytes, const std::vector<T>& values) {
  const auto* p = reinterpret_cast<const unsigned char*>(values.data());
  bytes.insert(bytes.end(), p, p + values.size() * sizeof(T));
}

// Special values of `t`, tiled to kElements elements.
Tensor specials(DType t) {
  std::vector<unsigned char> bytes;
  const Tensor from_f32 = Tensor::from_vector<float>({static_cast<int64_t>(f32_specials().size())}, f32_specials());
  auto converted = [&](DType d) {
    const Tensor c = from_f32.to(d);
    const auto* p = static_cast<const unsigned char*>(c.raw());
    bytes.insert(bytes.end(), p, p + c.nbytes());
  };
  switch (t) {
    case DType::f32:
      append(bytes, f32_specials());
      break;
    case DType::f16:
      append<uint16_t>(bytes, {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00,
                               0x7c01, 0xfe00, 0x7dff, 0x3c00, 0x3555, 0x5bf8, 0x5c00, 0xd800, 0x57f8, 0x4170});
      converted(t);
      break;
    case DType::bf16:
      append<uint16_t>(bytes, {0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81,
                               0xffc0, 0x3f80, 0x4f00, 0xcf00, 0x5f00, 0xdf00, 0x477f, 0x4780, 0x437f, 0x4380});
      converted(t);
      break;
    case DType::i32:
      append<int32_t>(bytes, {0, 1, -1, 127, 128, 255, 256, -129, 2049, 2051, 257, 259, 65504, 65520, 65536, 16777217,
                              16777219, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
      break;
    case DType::i64:
      append<int64_t>(bytes, {0, 1, -1, 255, 256, -129, 2147483648LL, -2147483649LL, (1LL << 53) + 1, -(1LL << 40),
                              4294967296LL, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
      break;
    case DType::u8:
      for (int v = 0; v < 256; ++v) bytes.push_back(static_cast<unsigned char>(v));
      break;
    case DType::boolean:
      bytes = {0, 1};
      break;
  }
  const size_t es = dtype_size(t), count = bytes.size() / es;
  Tensor out({kElements}, t);
  auto* dst = static_cast<unsigned char*>(out.raw());
  for (int64_t i = 0; i < kElements; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * es, bytes.data() + (static_cast<size_t>(i) % count) * es, es);
  return out;
}

Tensor on(const Tensor& host, Device d) { return d.kind == DeviceKind::cpu ? host : host.to_device(d); }

// Runs Cast(x -> to) on `device`; the host copy of the result.
Tensor cast_on(Device device, const Tensor& host_x, DType to) {
  Tensor x = on(host_x, device);
  Graph g;
  Attrs at;
  at.dtype = to;
  const int y = g.add(Op::Cast, {g.variable("x", x)}, at, "cast");  // not g.cast(): no elision when equal
  Program p(std::move(g), {y}, {}, device);
  ExecContext ctx;
  ctx.device = device;
  p.run(ctx);
  return p.output(y);
}

int64_t first_difference(const Tensor& a, const Tensor& b) {
  const size_t es = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(static_cast<const char*>(a.raw()) + static_cast<size_t>(i) * es,
                    static_cast<const char*>(b.raw()) + static_cast<size_t>(i) * es, es) != 0)
      return i;
  return -1;
}

TEST(CastHarness, EveryPairOfDTypesMatchesTensorTo) {
  int pairs = 0;
  for (DeviceKind kind : runnable_kinds()) {
    const Device device{kind, 0};
    for (int f = 0; f < kDTypeCount; ++f)
      for (int t = 0; t < kDTypeCount; ++t) {
        const auto from = static_cast<DType>(f), to = static_cast<DType>(t);
        const std::string what =
            device.to_string() + " Cast " + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
        if (!has_kernel(kind, Op::Cast, KernelSignature({from}, to))) {
          EXPECT_NE(kind, DeviceKind::cpu) << what << ": the cpu casts between every two dtypes";
          continue;
        }
        const Tensor x = specials(from);
        const Tensor got = cast_on(device, x, to);
        const Tensor want = x.to(to);  // after the run: on this thread too, subnormals read as zero (DAZ)
        ASSERT_EQ(got.dtype(), to) << what;
        const int64_t at = first_difference(got, want);
        if (at >= 0)
          ADD_FAILURE() << what << ": element " << at << " " << x.slice_rows(at, at + 1).to_string() << " casts to "
                        << got.slice_rows(at, at + 1).to_string() << ", Tensor::to gives "
                        << want.slice_rows(at, at + 1).to_string();
        ++pairs;
      }
  }
  EXPECT_GE(pairs, kDTypeCount * kDTypeCount);
}

// float32 -> 16 bits -> float32 in one program: exactly tk::float16 / bfloat16's rounding, NaNs included.
TEST(CastHarness, RoundTripThroughSixteenBitsEqualsRounding) {
  const Tensor x = specials(DType::f32);
  for (DeviceKind kind : runnable_kinds()) {
    const Device device{kind, 0};
    for (DType mid : {DType::f16, DType::bf16}) {
      if (!has_kernel(kind, Op::Cast, KernelSignature({DType::f32}, mid)) ||
          !has_kernel(kind, Op::Cast, KernelSignature({mid}, DType::f32)))
        continue;  // the coverage test fails for it
      Tensor bound = on(x, device);
      Graph g;
      Attrs narrow, wide;
      narrow.dtype = mid;
      wide.dtype = DType::f32;
      const int h = g.add(Op::Cast, {g.variable("x", bound)}, narrow);
      const int y = g.add(Op::Cast, {h}, wide);
      Program p(std::move(g), {h, y}, {}, device);
      ExecContext ctx;
      ctx.device = device;
      p.run(ctx);
      const Tensor half = p.output(h), back = p.output(y);
      int64_t wrong = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const float v = x.data<float>()[i];
        const uint16_t bits = mid == DType::f16 ? float16::from_float(v).bits : bfloat16::from_float(v).bits;
        const float round_trip =
            mid == DType::f16 ? float16::from_bits(bits).to_float() : bfloat16::from_bits(bits).to_float();
        uint16_t got_bits;
        std::memcpy(&got_bits, static_cast<const char*>(half.raw()) + 2 * i, 2);
        const bool ok =
            got_bits == bits && std::bit_cast<uint32_t>(back.data<float>()[i]) == std::bit_cast<uint32_t>(round_trip);
        if (!ok && wrong++ < 5)
          ADD_FAILURE() << device.to_string() << " float32 -> " << dtype_name(mid) << " -> float32 of " << v << " (0x"
                        << std::hex << std::bit_cast<uint32_t>(v) << "): 16-bit 0x" << got_bits << " want 0x" << bits
                        << ", back " << back.data<float>()[i] << " want " << round_trip << std::dec;
      }
      EXPECT_EQ(wrong, 0);
    }
  }
}

// A bool tensor's byte that is neither 0 nor 1 (foreign data) reads as true, in Cast as in Tensor::to.
TEST(CastHarness, AnyNonzeroBoolByteIsTrue) {
  Tensor x({6}, DType::boolean);
  const unsigned char bytes[6] = {0, 1, 2, 0x80, 0xff, 0};
  std::memcpy(x.raw(), bytes, 6);
  for (DeviceKind kind : runnable_kinds())
    for (DType to : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8}) {
      if (!has_kernel(kind, Op::Cast, KernelSignature({DType::boolean}, to))) continue;
      const Tensor got = cast_on(Device{kind, 0}, x, to), want = x.to(to);
      EXPECT_EQ(first_difference(got, want), -1) << dtype_name(to);
      const Tensor f = host_f32(got);
      for (int i = 0; i < 6; ++i) EXPECT_EQ(f.data<float>()[i], bytes[i] ? 1.0f : 0.0f) << dtype_name(to) << " " << i;
    }
}

// positive() and positive_mask() (relu's gradient mask on 16-bit values, from the bits alone) agree with the
// value's float32 comparison for every one of the 65,536 bit patterns of both formats: zeros, subnormals, Inf, NaN.
TEST(HalfBits, PositiveFromTheBitsEqualsTheFloatComparisonForEveryPattern) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float16 h = float16::from_bits(bits);
    const bfloat16 g = bfloat16::from_bits(bits);
    ASSERT_EQ(positive(h), h.to_float() > 0.0f) << "float16 bits " << b;
    ASSERT_EQ(positive(g), g.to_float() > 0.0f) << "bfloat16 bits " << b;
    ASSERT_EQ(positive_mask(h), positive(h) ? 0xffffu : 0u) << b;
    ASSERT_EQ(positive_mask(g), positive(g) ? 0xffffu : 0u) << b;
  }
}

}  // namespace
}  // namespace tk::graph::harness
