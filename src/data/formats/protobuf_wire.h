// The protobuf wire format (protobuf.dev/programming-guides/encoding), just enough to read and write
// tf.train.Example: varints, fixed32 / fixed64, length-delimited fields, and skipping unknown fields
// (groups included). Every read is bounds-checked against the bytes actually present.
//
//   wire::Reader r(bytes, 0, "Example");
//   uint32_t field; wire::WireType type;
//   while (r.next(field, type)) {
//     if (field == 1 && type == wire::WireType::len) parse_features(r.sub(r.len(), "Features"));
//     else r.skip(field, type);   // unknown field: skipped, as protobuf does
//   }
//
// trainkit does not depend on libprotobuf: the Example schema is three nested messages (Example ->
// Features -> Feature -> {Bytes,Float,Int64}List), which a hand-written decoder covers in a page.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "data/formats/bytes.h"
#include "trainkit/core/error.h"

namespace tk::data::wire {

enum class WireType : uint8_t { varint = 0, fixed64 = 1, len = 2, start_group = 3, end_group = 4, fixed32 = 5 };

// Reads one message. Problems throw FormatError("malformed <root>: <problem> in <message> at byte N of the
// record"); offsets count from the start of the outermost buffer, so nested readers report them too.
class Reader {
 public:
  // `message` names the message type in errors ("Feature"); `base` is where buf starts in the outer buffer.
  Reader(std::string_view buf, size_t base, const char* message, const char* root = "tf.train.Example")
      : buf_(buf), base_(base), message_(message), root_(root) {}

  size_t offset() const { return base_ + pos_; }
  bool at_end() const { return pos_ == buf_.size(); }
  // The next field's number and wire type; false at the end of the message.
  bool next(uint32_t& field, WireType& type) {
    if (pos_ == buf_.size()) return false;
    field_start_ = pos_;
    uint64_t tag = varint();
    if (tag > UINT32_MAX) fail("field tag " + std::to_string(tag) + " does not fit in 32 bits", base_ + field_start_);
    field = static_cast<uint32_t>(tag >> 3);
    uint32_t wt = static_cast<uint32_t>(tag & 7);
    if (field == 0) fail("field number 0 (protobuf field numbers start at 1)", base_ + field_start_);
    if (wt > 5)
      fail("wire type " + std::to_string(wt) + " of field " + std::to_string(field) + " (valid: 0 to 5)",
           base_ + field_start_);
    type = static_cast<WireType>(wt);
    return true;
  }
  uint64_t varint() {
    size_t start = pos_;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ == buf_.size()) fail("truncated varint", base_ + start);
      auto b = static_cast<uint8_t>(buf_[pos_++]);
      v |= uint64_t{b & 0x7Fu} << shift;  // bits beyond 64 in a 10th byte are dropped, as protobuf does
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes", base_ + start);
  }
  uint32_t fixed32() { return fixed<uint32_t>("fixed32 value"); }
  uint64_t fixed64() { return fixed<uint64_t>("fixed64 value"); }
  // The payload of a length-delimited field, checked against the bytes left in this message.
  std::string_view len() {
    size_t start = pos_;
    uint64_t n = varint();
    if (n > buf_.size() - pos_)
      fail("length-delimited field claims " + std::to_string(n) + " bytes but only " +
               std::to_string(buf_.size() - pos_) + " remain in the " + message_,
           base_ + start);
    std::string_view payload = buf_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return payload;
  }
  // A reader for an embedded message whose bytes `payload` came from len() on this reader.
  Reader sub(std::string_view payload, const char* message) const {
    return Reader(payload, base_ + static_cast<size_t>(payload.data() - buf_.data()), message, root_);
  }
  // Skips the value of a field this decoder does not know (protobuf keeps such fields as unknown fields).
  void skip(uint32_t field, WireType type, int depth = 0) {
    switch (type) {
      case WireType::varint:
        varint();
        return;
      case WireType::fixed64:
        fixed64();
        return;
      case WireType::len:
        len();
        return;
      case WireType::fixed32:
        fixed32();
        return;
      case WireType::start_group: {
        size_t start = field_start_;
        if (depth >= kMaxDepth) fail("groups nested more than " + std::to_string(kMaxDepth) + " deep", base_ + start);
        uint32_t f = 0;
        WireType t{};
        while (next(f, t)) {
          if (t == WireType::end_group) {
            if (f != field)
              fail(
                  "end-group tag of field " + std::to_string(f) + " closes the group of field " + std::to_string(field),
                  base_ + field_start_);
            return;
          }
          skip(f, t, depth + 1);
        }
        fail("group of field " + std::to_string(field) + " is not closed", base_ + start);
      }
      case WireType::end_group:
        fail("end-group tag of field " + std::to_string(field) + " without a group to close", base_ + field_start_);
    }
  }
  // `at` is an offset in the outermost buffer, as offset() returns.
  [[noreturn]] void fail(const std::string& problem, size_t at) const {
    throw FormatError("malformed " + std::string(root_) + ": " + problem + " in " + message_ + " at byte " +
                      std::to_string(at) + " of the record");
  }

 private:
  static constexpr int kMaxDepth = 100;  // protobuf's default recursion limit
  // A little-endian T at pos_, checked against the bytes left (`what` names it in the error).
  template <ByteWord T>
  T fixed(const char* what) {
    need(sizeof(T), what);
    const auto v = load_le<T>(buf_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  void need(size_t n, const char* what) {
    if (buf_.size() - pos_ < n)
      fail("truncated " + std::string(what) + " (" + std::to_string(n) + " bytes needed, " +
               std::to_string(buf_.size() - pos_) + " left)",
           base_ + pos_);
  }

  std::string_view buf_;
  size_t base_ = 0;
  size_t pos_ = 0;
  size_t field_start_ = 0;
  const char* message_;
  const char* root_;
};

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(static_cast<uint8_t>(v) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
inline void put_tag(std::string& out, uint32_t field, WireType type) {
  put_varint(out, uint64_t{field} << 3 | static_cast<uint8_t>(type));
}
inline void put_fixed32(std::string& out, uint32_t v) {
  char b[4];
  store_le(b, v);
  out.append(b, sizeof b);
}
inline void put_len(std::string& out, uint32_t field, std::string_view payload) {
  put_tag(out, field, WireType::len);
  put_varint(out, payload.size());
  out.append(payload);
}

}  // namespace tk::data::wire
