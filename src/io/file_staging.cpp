// for_each_piece: a tensor's bytes from its own memory, or through one bounded staging buffer (file_staging.h).
#include "io/file_staging.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/device_bytes.h"

namespace tk::io {

namespace {
std::atomic<size_t> staging_capacity{kFileStagingBytes};
std::atomic<const HostPinning*> host_pinning{nullptr};
}  // namespace

const HostPinning* set_host_pinning(const HostPinning* pinning) { return host_pinning.exchange(pinning); }

size_t file_staging_capacity() { return staging_capacity.load(); }
void set_file_staging_capacity(size_t bytes) { staging_capacity = std::max(bytes, size_t{256}); }

size_t file_staging_bytes(const Tensor& t) {
  if (!t.defined() || t.on_host()) return 0;
  return std::min(t.nbytes(), file_staging_capacity());
}

std::string file_owner(const std::string& file, const std::string& what, const std::string& tensor) {
  return file + ": " + what + " " + tensor;
}

StagingBuffer::StagingBuffer(size_t bytes, Device device, const std::string& file, const std::string& tensor)
    : buffer_(Shape{static_cast<int64_t>(bytes)}, DType::u8, Device::cpu(), file_owner(file, "staging for", tensor)),
      device_(device) {
  const HostPinning* p = host_pinning.load();
  if (device.kind != DeviceKind::cpu && p) pinned_ = p->pin(device, buffer_.raw(), bytes);
}

StagingBuffer::~StagingBuffer() {
  if (pinned_) host_pinning.load()->unpin(device_, buffer_.raw());
}

TensorBytes::TensorBytes(const Tensor& t, std::string file, std::string tensor, size_t capacity)
    : t_(t), file_(std::move(file)), tensor_(std::move(tensor)) {
  // A host tensor is handed over from its own memory: whole unless the caller asks for pieces.
  if (capacity == 0) capacity = t.on_host() ? t.nbytes() : file_staging_capacity();
  const size_t element = dtype_size(t.dtype());
  capacity_ = std::max(element, std::min(t.nbytes(), capacity) / element * element);
}

const void* TensorBytes::range(size_t offset, size_t n) {
  if (offset + n > t_.nbytes())
    throw InvalidArgument(file_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) + ") of " +
                          tensor_ + ", which has " + std::to_string(t_.nbytes()));
  if (n > capacity_)
    throw InvalidArgument(file_ + ": " + std::to_string(n) + " bytes of " + tensor_ + " at once, more than the " +
                          std::to_string(capacity_) + "-byte staging buffer");
  if (t_.on_host()) return static_cast<const char*>(t_.raw()) + offset;
  if (!staging_) staging_ = std::make_unique<StagingBuffer>(capacity_, t_.device(), file_, tensor_);
  device_copy(staging_->data(), Device::cpu(), static_cast<const char*>(t_.raw()) + offset, t_.device(), n);
  return staging_->data();
}

void for_each_piece(const Tensor& t, const std::string& file, const std::string& tensor,
                    const std::function<void(const void*, size_t)>& piece, size_t piece_bytes) {
  const size_t total = t.nbytes();
  if (total == 0) return;
  if (t.on_host()) {
    piece(t.raw(), total);
    return;
  }
  TensorBytes bytes(t, file, tensor, piece_bytes);
  for (size_t done = 0; done < total; done += bytes.capacity()) {
    const size_t n = std::min(bytes.capacity(), total - done);
    piece(bytes.range(done, n), n);
  }
}

namespace {

void pread_all(int fd, uint64_t offset, void* dst, size_t n, const std::string& file, const std::string& tensor) {
  char* p = static_cast<char*>(dst);
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw IoError(file + ": cannot read " + tensor + " back from trainkit's temporary data file (" +
                    (got < 0 ? std::string(std::strerror(errno)) : std::string("it ends early")) +
                    "; check the temporary directory, TMPDIR)");
    done += static_cast<size_t>(got);
  }
}

}  // namespace

void read_file_into(int fd, uint64_t offset, Tensor& dst, const std::string& file, const std::string& tensor) {
  const size_t total = dst.nbytes();
  if (total == 0) return;
  if (dst.on_host()) {
    pread_all(fd, offset, dst.raw(), total, file, tensor);
    return;
  }
  const size_t capacity = std::min(total, file_staging_capacity());
  StagingBuffer staging(capacity, dst.device(), file, tensor);
  for (size_t done = 0; done < total; done += capacity) {
    const size_t n = std::min(capacity, total - done);
    pread_all(fd, offset + done, staging.data(), n, file, tensor);
    device_copy(static_cast<char*>(dst.raw()) + done, dst.device(), staging.data(), Device::cpu(), n);
  }
}

}  // namespace tk::io
