// write_model (onnx_file.h): the ModelProto's lengths first (arithmetic over the held messages and each weight's
// byte count), then its bytes in order through a small write buffer, each weight's from its own memory.
#include "io/onnx_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <utility>

#include "core/device_bytes.h"
#include "io/fd_write.h"
#include "io/file_staging.h"
#include "runtime/device_memory.h"
#include "trainkit/core/error.h"
#include "trainkit/io/atomic_file.h"

namespace tk::io::onnx {
namespace {

using data::wire::WireType;

size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
// A length-delimited field's bytes: its tag, its length and the payload.
size_t len_field_size(uint32_t field, size_t payload) {
  return varint_size(uint64_t{field} << 3 | static_cast<uint8_t>(WireType::len)) + varint_size(payload) + payload;
}
size_t initializer_size(const Initializer& t) { return t.head.bytes().size() + len_field_size(9, t.raw_bytes()); }

// The file's bytes through one 64 KiB buffer (the many small messages cost one write each otherwise); a large piece
// goes to the file directly.
class Sink {
 public:
  Sink(int fd, std::string label, size_t total) : fd_(fd), label_(std::move(label)), total_(total) {
    buf_.reserve(kBuffer);
  }
  void put(const void* p, size_t n) {
    if (buf_.size() + n > kBuffer) flush();
    if (n >= kBuffer) return write_out(p, n);
    buf_.append(static_cast<const char*>(p), n);
  }
  void put(const std::string& s) { put(s.data(), s.size()); }
  // A length-delimited field's tag and length (its payload follows).
  void put_len_header(uint32_t field, size_t payload) {
    std::string h;
    data::wire::put_tag(h, field, WireType::len);
    data::wire::put_varint(h, payload);
    put(h);
  }
  void flush() {
    write_out(buf_.data(), buf_.size());
    buf_.clear();
  }
  size_t written() const { return written_ + buf_.size(); }

 private:
  static constexpr size_t kBuffer = size_t{64} << 10;
  void write_out(const void* p, size_t n) {
    const size_t put = write_fully(fd_, p, n);
    written_ += put;
    if (put < n)
      throw IoError("cannot write " + label_ + " (" + std::to_string(written_) + " of " + std::to_string(total_) +
                    " bytes written): " + std::strerror(errno) + " (is the disk full? the previous file is untouched)");
  }
  int fd_;
  std::string label_;
  size_t total_, written_ = 0;
  std::string buf_;
};

}  // namespace

void conv_kernel_bytes(const Tensor& w, const std::string& file, const std::string& name, bool staged,
                       const std::function<void(const void*, size_t)>& put) {
  const int64_t kh = w.shape()[0], kw = w.shape()[1], ci = w.shape()[2], co = w.shape()[3];
  const int64_t rows = kh * kw * ci;  // element (f, c, i, j) is source row r = (i * KW + j) * C + c, column f
  float out[4096];                    // the output in pieces of 16 KiB
  size_t used = 0;
  auto emit = [&](float v) {
    if (used == std::size(out)) put(out, std::exchange(used, 0) * sizeof(float));
    out[used++] = v;
  };
  if (w.on_host() && !staged) {
    const float* src = w.data<float>();  // (rows, co)
    for (int64_t f = 0; f < co; ++f)
      for (int64_t c = 0; c < ci; ++c)
        for (int64_t r = c; r < rows; r += ci) emit(src[r * co + f]);
  } else {
    // Columns [f0, f0 + cols) of every row staged together: at most file_staging_capacity(), or one column of every
    // row when that alone is larger.
    const int64_t cols = std::clamp<int64_t>(
        static_cast<int64_t>(file_staging_capacity() / (static_cast<size_t>(rows) * sizeof(float))), 1, co);
    StagingBuffer staging(static_cast<size_t>(rows * cols) * sizeof(float), w.device(), file, name);
    float* block = static_cast<float*>(staging.data());  // (rows, n)
    const char* src = static_cast<const char*>(w.raw());
    for (int64_t f0 = 0; f0 < co; f0 += cols) {
      const int64_t n = std::min(cols, co - f0);
      for (int64_t r = 0; r < rows; ++r)
        device_copy(block + r * n, Device::cpu(), src + static_cast<size_t>(r * co + f0) * sizeof(float), w.device(),
                    static_cast<size_t>(n) * sizeof(float));
      for (int64_t f = 0; f < n; ++f)
        for (int64_t c = 0; c < ci; ++c)
          for (int64_t r = c; r < rows; r += ci) emit(block[r * n + f]);
    }
  }
  if (used) put(out, used * sizeof(float));
}

void write_model(const std::string& path, const ModelParts& m) {
  const runtime::FileOperation op("exporting " + path);
  size_t graph = 0;
  for (const proto::Message& n : m.nodes) graph += len_field_size(1, n.bytes().size());
  graph += len_field_size(2, m.graph_name.size());
  for (const Initializer& t : m.initializers) graph += len_field_size(5, initializer_size(t));
  for (const proto::Message& i : m.inputs) graph += len_field_size(11, i.bytes().size());
  for (const proto::Message& o : m.outputs) graph += len_field_size(12, o.bytes().size());
  const size_t total = m.head.bytes().size() + len_field_size(7, graph) + m.tail.bytes().size();

  AtomicFile file(path);
  const int fd = ::open(file.temp_path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create " + file.temp_path().string() + ": " + std::strerror(errno));
  CloseFd closer{fd};
  Sink out(fd, path, total);
  out.put(m.head.bytes());
  out.put_len_header(7, graph);
  for (const proto::Message& n : m.nodes) {
    out.put_len_header(1, n.bytes().size());
    out.put(n.bytes());
  }
  out.put_len_header(2, m.graph_name.size());
  out.put(m.graph_name);
  for (const Initializer& t : m.initializers) {
    out.put_len_header(5, initializer_size(t));
    out.put(t.head.bytes());
    out.put_len_header(9, t.raw_bytes());
    if (!t.weight)
      out.put(t.raw);
    else if (t.to_fckk)
      conv_kernel_bytes(*t.weight, path, t.weight_name, false, [&](const void* p, size_t n) { out.put(p, n); });
    else
      for_each_piece(*t.weight, path, t.weight_name, [&](const void* p, size_t n) { out.put(p, n); });
  }
  for (const proto::Message& i : m.inputs) {
    out.put_len_header(11, i.bytes().size());
    out.put(i.bytes());
  }
  for (const proto::Message& o : m.outputs) {
    out.put_len_header(12, o.bytes().size());
    out.put(o.bytes());
  }
  out.put(m.tail.bytes());
  out.flush();
  if (out.written() != total)  // the lengths written up front must describe the bytes that followed
    throw Error("export_onnx: wrote " + std::to_string(out.written()) + " bytes of " + path + ", expected " +
                std::to_string(total) + " (a bug: please report it)");
  closer.fd = -1;
  if (::close(fd) != 0) throw IoError("cannot write " + path + ": " + std::strerror(errno));
  file.commit();
}

}  // namespace tk::io::onnx
