#include "data/formats/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define TK_CRC32C_X86 1
#endif

#include "data/formats/bytes.h"

namespace tk::data {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reflected

// kTable[0] is the classic byte-at-a-time table; kTable[k][b] is the CRC contribution of byte b followed by
// k zero bytes, so eight table lookups advance the CRC by eight bytes at once (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}
constexpr Tables kTable = make_tables();
static_assert(kTable[0][1] == 0xF26B8303u, "CRC-32C table");

#ifdef TK_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  // Byte steps until p is 8-aligned, so the 8-byte loop never straddles a cache line needlessly.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return ~static_cast<uint32_t>(c);
}
#endif

using ExtendFn = uint32_t (*)(uint32_t, const void*, size_t);
ExtendFn choose() { return crc32c_sse42_available() ? crc32c_extend_sse42 : crc32c_extend_portable; }

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w = load_le<uint64_t>(p) ^ c;
    c = kTable[7][w & 0xFF] ^ kTable[6][(w >> 8) & 0xFF] ^ kTable[5][(w >> 16) & 0xFF] ^ kTable[4][(w >> 24) & 0xFF] ^
        kTable[3][(w >> 32) & 0xFF] ^ kTable[2][(w >> 40) & 0xFF] ^ kTable[1][(w >> 48) & 0xFF] ^ kTable[0][w >> 56];
  }
  for (; n > 0; --n) c = kTable[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c_extend_sse42([[maybe_unused]] uint32_t crc, [[maybe_unused]] const void* data,
                             [[maybe_unused]] size_t n) {
#ifdef TK_CRC32C_X86
  return extend_sse42(crc, static_cast<const uint8_t*>(data), n);
#else
  return crc32c_extend_portable(crc, data, n);
#endif
}

bool crc32c_sse42_available() {
#ifdef TK_CRC32C_X86
  // __builtin_cpu_init first: this may run from another file's static initializer, before libgcc's own.
  static const bool available = (__builtin_cpu_init(), __builtin_cpu_supports("sse4.2"));
  return available;
#else
  return false;
#endif
}

const char* crc32c_implementation() { return crc32c_sse42_available() ? "sse4.2" : "slicing-by-8"; }

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  static const ExtendFn fn = choose();
  return fn(crc, data, n);
}

}  // namespace tk::data
