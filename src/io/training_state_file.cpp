// The training-state file: encode, decode (bounds-checked at every read; CRC over the payload), save, load.
#include "trainkit/io/training_state_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "data/formats/bytes.h"
#include "data/formats/crc32c.h"
#include "io/fd_write.h"
#include "io/file_staging.h"
#include "runtime/device_memory.h"
#include "trainkit/core/error.h"
#include "trainkit/io/atomic_file.h"

namespace tk::io {
namespace {

constexpr char kMagic[8] = {'T', 'K', 'S', 'T', 'A', 'T', 'E', '\n'};
constexpr size_t kHeader = 8 + 4 + 8;
constexpr int kMaxRank = 8;

// The payload as its small fields (`out`) and the tensors whose bytes go between them, referenced, not copied: a
// save streams each tensor from its own memory (or a GPU's through one staging buffer, io/file_staging.h).
class Writer {
 public:
  std::vector<std::byte> out;
  struct Data {
    size_t at;  // position in out
    Tensor t;   // whose bytes go there
    std::string name;
  };
  std::vector<Data> data;
  size_t size() const {
    size_t n = out.size();
    for (const Data& d : data) n += d.t.nbytes();
    return n;
  }
  // sink(bytes, n) over the payload in order.
  void emit(const std::string& file, const std::function<void(const void*, size_t)>& sink) const {
    size_t from = 0;
    for (const Data& d : data) {
      if (d.at > from) sink(out.data() + from, d.at - from);
      for_each_piece(d.t, file, d.name, sink);
      from = d.at;
    }
    if (out.size() > from) sink(out.data() + from, out.size() - from);
  }
  template <data::ByteWord T>
  void word(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    data::store_le<T>(out.data() + at, v);
  }
  void i64(int64_t v) { word<uint64_t>(static_cast<uint64_t>(v)); }
  void str(const std::string& s) {
    word<uint32_t>(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  }
  // `label`: the tensor in owner tags (its name, or which slot).
  void tensor(const std::string& name, const Tensor& t, const std::string& label) {
    str(name);
    word<uint8_t>(static_cast<uint8_t>(t.dtype()));
    word<uint8_t>(static_cast<uint8_t>(t.shape().rank()));
    for (int d = 0; d < t.shape().rank(); ++d) i64(t.shape()[d]);
    word<uint64_t>(t.nbytes());
    data.push_back({out.size(), t, label});
  }
};

class Reader {
 public:
  Reader(std::span<const std::byte> b, size_t base, const std::string& name) : b_(b), base_(base), name_(name) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(name_ + ": " + what + " at byte " + std::to_string(base_ + at_) +
                      " (the training-state file is damaged: delete it to start over, or restore a copy)");
  }
  const std::byte* take(size_t n, const char* what) {
    if (n > b_.size() - at_)
      fail(std::string("truncated ") + what + " (needs " + std::to_string(n) + " bytes, " +
           std::to_string(b_.size() - at_) + " left)");
    const std::byte* p = b_.data() + at_;
    at_ += n;
    return p;
  }
  template <data::ByteWord T>
  T word(const char* what) {
    return data::load_le<T>(take(sizeof(T), what));
  }
  int64_t i64(const char* what) {
    const uint64_t v = word<uint64_t>(what);
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(std::string("negative ") + what);
    return static_cast<int64_t>(v);
  }
  std::string str(const char* what) {
    const uint32_t n = word<uint32_t>(what);
    const std::byte* p = take(n, what);
    return {reinterpret_cast<const char*>(p), n};
  }
  Tensor tensor(std::string& name) {
    name = str("tensor name");
    const uint8_t code = word<uint8_t>("dtype");
    if (code >= kDTypeCount) fail("unknown dtype code " + std::to_string(code) + " of '" + name + "'");
    const auto dtype = static_cast<DType>(code);
    const int rank = word<uint8_t>("rank");
    if (rank > kMaxRank) fail("rank " + std::to_string(rank) + " of '" + name + "' (at most 8)");
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t v = i64("dimension");
      if (v > (int64_t{1} << 40)) fail("dimension " + std::to_string(v) + " of '" + name + "'");
      dims.push_back(v);
      if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(v))
        fail("shape of '" + name + "' overflows");
      numel *= static_cast<uint64_t>(v);
    }
    const uint64_t nbytes = word<uint64_t>("tensor size");
    if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(dtype) || nbytes != numel * dtype_size(dtype))
      fail("'" + name + "' declares " + std::to_string(nbytes) + " bytes for " + std::to_string(numel) + " elements");
    const std::byte* p = take(nbytes, "tensor data");
    Tensor t{Shape(dims), dtype, Device::cpu(),
             file_owner(name_, "read of", name.empty() ? "an optimizer slot" : name)};
    if (nbytes) std::memcpy(t.raw(), p, nbytes);
    return t;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const std::byte> b_;
  size_t base_;
  size_t at_ = 0;
  const std::string& name_;
};

Writer payload(const TrainingState& s) {
  Writer p;
  p.str(s.model_name);
  p.word<uint64_t>(s.weights.size());
  for (size_t i = 0; i < s.weights.size(); ++i)
    p.tensor(i < s.weight_names.size() ? s.weight_names[i] : std::string(), s.weights[i],
             i < s.weight_names.size() ? s.weight_names[i] : "weight " + std::to_string(i));
  p.str(s.optimizer);
  p.word<uint32_t>(static_cast<uint32_t>(s.slots_per_variable));
  p.word<uint64_t>(s.optimizer_slots.size());
  for (size_t i = 0; i < s.optimizer_slots.size(); ++i)
    p.tensor({}, s.optimizer_slots[i], "optimizer slot " + std::to_string(i));
  p.i64(s.iterations);
  p.word<uint32_t>(std::bit_cast<uint32_t>(s.learning_rate));
  p.word<uint64_t>(s.step);
  p.word<uint32_t>(static_cast<uint32_t>(s.threads));
  p.str(s.kernel_choices);
  p.str(s.dtype_policy);  // version 3
  p.word<uint32_t>(std::bit_cast<uint32_t>(s.loss_scale));
  p.i64(s.loss_scale_counter);
  p.i64(s.skipped_steps);
  const FitPosition& f = s.position;
  p.i64(f.epoch);
  p.i64(f.batch);
  p.word<uint64_t>(f.shuffle_seed);
  p.i64(f.shuffles);
  p.word<uint64_t>(f.data_pass);
  p.i64(f.pass_offset);
  p.word<uint8_t>(f.dataset ? 1 : 0);

  return p;
}

void put_header(Writer& file, uint64_t payload_bytes) {
  file.raw(kMagic, sizeof kMagic);
  file.word<uint32_t>(kTrainingStateVersion);
  file.word<uint64_t>(payload_bytes);
}

}  // namespace

std::vector<std::byte> encode_training_state(const TrainingState& s) {
  const Writer p = payload(s);
  Writer file;
  put_header(file, p.size());
  uint32_t crc = 0;
  p.emit("a training state in memory", [&](const void* bytes, size_t n) {
    file.raw(bytes, n);
    crc = data::crc32c_extend(crc, bytes, n);
  });
  file.word<uint32_t>(crc);
  return std::move(file.out);
}

TrainingState decode_training_state(std::span<const std::byte> bytes, const std::string& name) {
  Reader head(bytes, 0, name);
  const std::byte* magic = head.take(sizeof kMagic, "header");
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw FormatError(name + ": not a trainkit training-state file (found bytes " +
                      data::hex_bytes(magic, sizeof kMagic) + " at byte 0, expected \"TKSTATE\\n\")");
  const uint32_t version = head.word<uint32_t>("version");
  if (version < kOldestTrainingStateVersion || version > kTrainingStateVersion)
    throw FormatError(name + ": training-state format version " + std::to_string(version) +
                      " at byte 8; this build reads versions " + std::to_string(kOldestTrainingStateVersion) + " to " +
                      std::to_string(kTrainingStateVersion) + " (resume with the trainkit that wrote it)");
  const uint64_t size = head.word<uint64_t>("payload size");
  if (size > bytes.size() - kHeader || bytes.size() - kHeader - size != 4)
    head.fail("payload size " + std::to_string(size) + " does not match the file's " + std::to_string(bytes.size()) +
              " bytes (truncated or appended to)");
  const std::span<const std::byte> payload = bytes.subspan(kHeader, size);
  const uint32_t stored = data::load_le<uint32_t>(bytes.data() + kHeader + size);
  const uint32_t actual = data::crc32c(payload.data(), payload.size());
  if (stored != actual)
    throw FormatError(name + ": checksum mismatch over bytes " + std::to_string(kHeader) + ".." +
                      std::to_string(kHeader + size) +
                      " (the training-state file is damaged: delete it to start "
                      "over, or restore a copy)");

  Reader r(payload, kHeader, name);
  TrainingState s;
  s.model_name = r.str("model name");
  const uint64_t nw = r.word<uint64_t>("weight count");
  if (nw > payload.size()) r.fail("weight count " + std::to_string(nw));
  for (uint64_t i = 0; i < nw; ++i) {
    std::string wname;
    s.weights.push_back(r.tensor(wname));
    s.weight_names.push_back(std::move(wname));
  }
  s.optimizer = r.str("optimizer name");
  s.slots_per_variable = static_cast<int>(r.word<uint32_t>("slots per variable"));
  if (s.slots_per_variable > 16) r.fail("slots per variable " + std::to_string(s.slots_per_variable));
  const uint64_t ns = r.word<uint64_t>("slot count");
  if (ns > payload.size()) r.fail("slot count " + std::to_string(ns));
  for (uint64_t i = 0; i < ns; ++i) {
    std::string unused;
    s.optimizer_slots.push_back(r.tensor(unused));
  }
  s.iterations = r.i64("iterations");
  s.learning_rate = std::bit_cast<float>(r.word<uint32_t>("learning rate"));
  s.step = r.word<uint64_t>("step");
  const uint32_t threads = r.word<uint32_t>("thread count");
  if (threads > 4096) r.fail("thread count " + std::to_string(threads));
  s.threads = static_cast<int>(threads);
  s.kernel_choices = r.str("kernel choices");
  if (version >= 3) {  // version 2: float32, no loss scaling (the defaults)
    s.dtype_policy = r.str("dtype policy");
    if (s.dtype_policy != "float32" && s.dtype_policy != "mixed_float16" && s.dtype_policy != "mixed_bfloat16")
      r.fail("dtype policy '" + s.dtype_policy.substr(0, 64) + "'");
    s.loss_scale = std::bit_cast<float>(r.word<uint32_t>("loss scale"));
    if (!std::isfinite(s.loss_scale) || s.loss_scale < 0.0f) r.fail("loss scale " + std::to_string(s.loss_scale));
    s.loss_scale_counter = r.i64("loss-scale counter");
    s.skipped_steps = r.i64("skipped steps");
  }
  FitPosition& f = s.position;
  const int64_t epoch = r.i64("epoch");
  if (epoch > std::numeric_limits<int>::max()) r.fail("epoch " + std::to_string(epoch));
  f.epoch = static_cast<int>(epoch);
  f.batch = r.i64("batch");
  f.shuffle_seed = r.word<uint64_t>("shuffle seed");
  f.shuffles = r.i64("shuffle count");
  f.data_pass = r.word<uint64_t>("data pass");
  f.pass_offset = r.i64("pass offset");
  const uint8_t ds = r.word<uint8_t>("position kind");
  if (ds > 1) r.fail("position kind " + std::to_string(ds));
  f.dataset = ds == 1;
  if (!r.done()) r.fail("unexpected bytes after the position");
  return s;
}

void save_training_state(const std::filesystem::path& path, const TrainingState& state) {
  // Streamed: the header, then the payload's fields and each tensor from its own memory, the CRC extended as they
  // go. No copy of the weights or the optimizer state is made (a GPU's tensors pass through one staging buffer).
  const std::string label = path.string();
  const runtime::FileOperation op("saving the training state " + label);
  const Writer p = payload(state);
  AtomicFile file(path);
  const int fd = ::open(file.temp_path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create " + file.temp_path().string() + ": " + std::strerror(errno));
  CloseFd closer{fd};
  size_t written = 0;
  const size_t total = kHeader + p.size() + 4;
  auto put = [&](const void* bytes, size_t n) {
    const auto* b = static_cast<const char*>(bytes);
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, b + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw IoError("cannot write " + label + " (" + std::to_string(written) + " of " + std::to_string(total) +
                      " bytes written): " + std::strerror(errno) +
                      " (is the disk full? the previous file is untouched)");
      done += static_cast<size_t>(w);
      written += static_cast<size_t>(w);
    }
  };
  Writer head;
  put_header(head, p.size());
  put(head.out.data(), head.out.size());
  uint32_t crc = 0;
  p.emit(label, [&](const void* bytes, size_t n) {
    put(bytes, n);
    crc = data::crc32c_extend(crc, bytes, n);
  });
  std::byte tail[4];
  data::store_le<uint32_t>(tail, crc);
  put(tail, sizeof tail);
  closer.fd = -1;
  if (::close(fd) != 0) throw IoError("cannot write " + label + ": " + std::strerror(errno));
  file.commit();
}

TrainingState load_training_state(const std::filesystem::path& path) {
  const runtime::FileOperation op("loading the training state " + path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open training state " + path.string() + " (does it exist and is it readable?)");
  std::vector<std::byte> bytes;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 0) throw IoError("cannot read training state " + path.string());
  bytes.resize(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw IoError("cannot read training state " + path.string() + " (" + std::to_string(size) + " bytes)");
  return decode_training_state(bytes, path.string());
}

}  // namespace tk::io
