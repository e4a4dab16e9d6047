// CRC-32C (Castagnoli), the checksum that frames TFRecord and TensorBoard event-file records.
//
//   uint32_t c = tk::data::crc32c("123456789", 9);             // 0xE3069283
//   c = tk::data::crc32c_extend(c, more.data(), more.size());  // same as one call over both buffers
//   uint32_t stored = tk::data::masked_crc32c(data, n);        // what a TFRecord file stores
//
// Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF. The SSE4.2 crc32 instruction is
// used when the CPU has it (checked once at run time), a slicing-by-8 table otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tk::data {

// CRC-32C of data[0, n) continuing from `crc`, the CRC-32C of the bytes before them (0 for none).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }
inline uint32_t crc32c(std::string_view s) { return crc32c_extend(0, s.data(), s.size()); }

// TFRecord's mask (crc32c.h in TensorFlow): a CRC of data that itself embeds CRCs is hard to reason about,
// so the stored value is rotated right by 15 bits and offset by a constant.
constexpr uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }
constexpr uint32_t unmask_crc32c(uint32_t masked) {
  uint32_t rot = masked - 0xA282EAD8u;
  return (rot >> 17) | (rot << 15);
}
inline uint32_t masked_crc32c(const void* data, size_t n) { return mask_crc32c(crc32c(data, n)); }

// The two implementations behind crc32c_extend, for tests and benchmarks. crc32c_extend_sse42 may only be
// called when crc32c_sse42_available(); crc32c_implementation() names the one crc32c_extend uses.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
uint32_t crc32c_extend_sse42(uint32_t crc, const void* data, size_t n);
bool crc32c_sse42_available();
const char* crc32c_implementation();

}  // namespace tk::data
