// Byte helpers shared by the dataset readers: fixed-width loads and stores in a stated byte order, byte
// swapping, and how file text and bytes are shown inside one-line error messages.
//
//   uint32_t n = load_le<uint32_t>(p);            // 4 bytes at p, any alignment, whatever the host's order
//   double d = std::bit_cast<double>(load_be<uint64_t>(p));
//   uint64_t a = load_le_uint(p, 6);              // 1 to 8 bytes (HDF5's address and length widths)
//   store_le<uint64_t>(header, record.size());
//   byteswap_in_place(data, n, 4);                // n elements of 4 bytes, each reversed (big-endian -> host)
//   "found bytes " + hex_bytes(p, 4)              // "93 4e 55 4d"
//   "descr " + quoted(descr)                      // 'text' with \xNN escapes, cut after 40 bytes with ...
//   std::FILE* f = open_file(path, prefix);       // fopen(path, "rb"), or an IoError naming errno's words
//   float f = narrow_to_float(d);                 // out-of-range doubles as infinities
//   read_growing(buf, n, chunk, read);            // up to n bytes, buf growing only with what arrives
//
// Loads and stores go through memcpy, which compilers turn into one (unaligned) move plus a bswap where the
// orders differ.
#pragma once
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "trainkit/core/error.h"

namespace tk::data {

template <typename T>
concept ByteWord = std::is_same_v<T, uint8_t> || std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t> ||
    std::is_same_v<T, uint64_t>;

// The value with its bytes in reverse order (std::byteswap is C++23).
template <ByteWord T>
constexpr T byteswap(T v) {
  if constexpr (sizeof(T) == 1) return v;
  if constexpr (sizeof(T) == 2) return __builtin_bswap16(v);
  if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
  if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
}

template <ByteWord T>
T load_le(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return std::endian::native == std::endian::little ? v : byteswap(v);
}

template <ByteWord T>
T load_be(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return std::endian::native == std::endian::big ? v : byteswap(v);
}

template <ByteWord T>
void store_le(void* p, T v) {
  if constexpr (std::endian::native != std::endian::little) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}

// An unsigned little-endian integer of n bytes, n from 0 to 8.
inline uint64_t load_le_uint(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
  return v;
}

// Reverses the bytes of each of `count` elements of `elem_size` bytes (1, 2, 4 or 8) at data, in place.
inline void byteswap_in_place(void* data, size_t count, size_t elem_size) {
  auto* p = static_cast<uint8_t*>(data);
  auto each = [&]<ByteWord T>(T) {
    for (size_t i = 0; i < count; ++i, p += sizeof(T)) {
      T v;
      std::memcpy(&v, p, sizeof v);
      v = byteswap(v);
      std::memcpy(p, &v, sizeof v);
    }
  };
  if (elem_size == 2) each(uint16_t{});
  if (elem_size == 4) each(uint32_t{});
  if (elem_size == 8) each(uint64_t{});
}

// Bytes as lowercase hex pairs separated by spaces: "93 4e 55".
inline std::string hex_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += "0123456789abcdef"[b[i] >> 4];
    s += "0123456789abcdef"[b[i] & 0xF];
  }
  return s;
}

// How escaped() and quoted() show bytes that would break a one-line message or hide what the file holds.
enum class Escape : uint8_t {
  bytes,  // controls (below 0x20) and everything from 0x7f as \xNN: raw file contents, header text, member names
  text,   // \n \r \t by name, other controls and 0x7f as \xNN, UTF-8 kept: CSV fields and column names
  names,  // as `bytes`, and '\' as \x5c, so the shown text is unambiguous: TFRecord feature names
};

// At most `max` bytes of s, escaped, followed by "..." when s is longer.
inline std::string escaped(std::string_view s, size_t max = 40, Escape how = Escape::bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (how == Escape::text && (c == '\n' || c == '\r' || c == '\t')) {
      out += '\\';
      out += c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
    } else if (c < 0x20 || c == 0x7F || (c > 0x7F && how != Escape::text) || (c == '\\' && how == Escape::names)) {
      out += "\\x";
      out += "0123456789abcdef"[c >> 4];
      out += "0123456789abcdef"[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

// escaped() in single quotes: 'x_train', 'a\x00b...'.
inline std::string quoted(std::string_view s, size_t max = 40, Escape how = Escape::bytes) {
  std::string out = "'";  // (GCC 12 flags "'" + escaped(...) with a false -Wrestrict)
  out += escaped(s, max, how);
  out += '\'';
  return out;
}

// fopen(path, "rb"); on failure an IoError: prefix + "cannot open: <errno's words> (check the path and ...)".
inline std::FILE* open_file(const std::string& path, const std::string& prefix) {
  errno = 0;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    throw IoError(prefix + "cannot open: " + (errno ? std::strerror(errno) : "unknown error") +
                  " (check the path and its permissions)");
  return f;
}

// A double as float: out-of-range values become infinities explicitly rather than through an undefined conversion.
inline float narrow_to_float(double d) {
  constexpr double kMax = std::numeric_limits<float>::max();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return d > kMax ? kInf : d < -kMax ? -kInf : static_cast<float>(d);
}

// Reads into buf (a byte string or vector) until it holds n bytes, at most `chunk` per read(dst, want) call, its
// capacity growing only with what arrives: a claimed size the stream cannot back costs at most one chunk more.
// Stops at the first short read, so buf.size() < n says the stream ended early.
template <typename Buf, typename Read>
void read_growing(Buf& buf, uint64_t n, size_t chunk, Read read) {
  while (buf.size() < n) {
    const size_t old = buf.size();
    const auto want = static_cast<size_t>(std::min<uint64_t>(chunk, n - old));
    if (old + want > buf.capacity())
      buf.reserve(static_cast<size_t>(std::min<uint64_t>(n, std::max(2 * buf.capacity(), old + want))));
    buf.resize(old + want);
    const size_t got = read(reinterpret_cast<uint8_t*>(buf.data()) + old, want);
    buf.resize(old + got);
    if (got < want) return;
  }
}

}  // namespace tk::data
