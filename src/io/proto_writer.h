// Writing protobuf messages in the wire format (protobuf.dev/programming-guides/encoding), the counterpart of
// data/formats/protobuf_wire.h's reader: enough for TensorBoard's Event / Summary / HistogramProto and ONNX's
// ModelProto, which trainkit writes without libprotobuf (docs/file-formats.md says why).
//
//   tk::io::proto::Message hist;
//   hist.f64(1, min).f64(2, max).packed_f64(6, limits);     // HistogramProto
//   tk::io::proto::Message value;
//   value.str(1, "dense/kernel/histogram").msg(5, hist);     // Summary.Value{tag, histo}
//   std::string bytes = value.bytes();
//
// Fields are written in the order the calls make them, which for trainkit's writers is field-number order,
// as protobuf's own serializer does; proto3 scalars equal to their default are the caller's to omit.
#pragma once
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "data/formats/protobuf_wire.h"

namespace tk::io::proto {

using data::wire::WireType;

class Message {
 public:
  Message& varint(uint32_t field, uint64_t v) {
    data::wire::put_tag(out_, field, WireType::varint);
    data::wire::put_varint(out_, v);
    return *this;
  }
  // int32 / int64 / enum: negative values take ten bytes (two's complement as uint64), as protobuf does.
  Message& i64(uint32_t field, int64_t v) { return varint(field, static_cast<uint64_t>(v)); }
  Message& f32(uint32_t field, float v) {
    data::wire::put_tag(out_, field, WireType::fixed32);
    data::wire::put_fixed32(out_, std::bit_cast<uint32_t>(v));
    return *this;
  }
  Message& f64(uint32_t field, double v) {
    data::wire::put_tag(out_, field, WireType::fixed64);
    put_fixed64(out_, std::bit_cast<uint64_t>(v));
    return *this;
  }
  Message& str(uint32_t field, std::string_view s) {
    data::wire::put_len(out_, field, s);
    return *this;
  }
  Message& msg(uint32_t field, const Message& m) { return str(field, m.out_); }
  Message& packed_f64(uint32_t field, std::span<const double> v) {
    std::string body;
    body.reserve(v.size() * 8);
    for (double d : v) put_fixed64(body, std::bit_cast<uint64_t>(d));
    return str(field, body);
  }
  const std::string& bytes() const { return out_; }
  bool empty() const { return out_.empty(); }

 private:
  static void put_fixed64(std::string& out, uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

}  // namespace tk::io::proto
