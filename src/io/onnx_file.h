// Writing an ONNX ModelProto to its file as a stream (issue 36): the graph's nodes and small constants are held as
// encoded messages (kilobytes), and each weight's raw_data is written at the end, straight from the weight's own
// memory into the atomic temporary file (a GPU's weight through one bounded staging buffer, io/file_staging.h). So
// an export allocates no copy of the weights, nor the whole protobuf: its lengths are computed first.
//
//   tk::io::onnx::ModelParts m;  m.nodes = ...;  m.initializers.push_back(Initializer::of_weight(head, w,
//   "conv/kernel")); tk::io::onnx::write_model("m.onnx", m);   // same bytes as serializing the whole ModelProto in
//   memory
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "io/proto_writer.h"
#include "trainkit/core/tensor.h"

namespace tk::io::onnx {

// TensorProto{dims 1, data_type 2, name 8, raw_data 9}: `head` holds fields 1, 2 and 8, raw_data comes from `raw`
// (a small constant's bytes) or from `weight` (float32, read when the file is written).
struct Initializer {
  proto::Message head;
  std::string raw;
  const Tensor* weight = nullptr;
  std::string weight_name;  // for owner tags and errors: the variable's name
  bool to_fckk = false;     // `weight` (KH, KW, C, F), written as ONNX's convolution weight (F, C, KH, KW)
  size_t raw_bytes() const { return weight ? weight->nbytes() : raw.size(); }
};

// ModelProto{ir_version 1, producer_name 2, producer_version 3, graph 7, opset_import 8} with
// GraphProto{node 1, name 2, initializer 5, input 11, output 12}: `head` holds the model's fields 1-3, `tail` its
// field 8.
struct ModelParts {
  proto::Message head, tail;
  std::vector<proto::Message> nodes, inputs, outputs;
  std::string graph_name;
  std::vector<Initializer> initializers;
};

// The bytes of a float32 convolution kernel (KH, KW, C, F) in ONNX's order (F, C, KH, KW), to `put` in pieces:
// from a host tensor's own memory, or (a device tensor; `staged` makes a host tensor take the same path, for the
// CPU's tests) through one staging buffer of at most file_staging_capacity() bytes, or one column of every row when
// that alone is larger.
void conv_kernel_bytes(const Tensor& w, const std::string& file, const std::string& name, bool staged,
                       const std::function<void(const void*, size_t)>& put);

// Writes the model to `path` atomically (the previous file stays if anything fails). IoError naming the file on a
// write error.
void write_model(const std::string& path, const ModelParts& m);

}  // namespace tk::io::onnx
