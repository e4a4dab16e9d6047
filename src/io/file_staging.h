// Bytes of a tensor for a file, a piece at a time, without a copy of the whole tensor: a tensor the host can read
// is handed over from its own memory; one in a GPU's memory goes through one bounded host staging buffer, charged to
// the cpu's budget under an owner tag naming the file and the tensor ("m.keras: staging for dense/kernel"). Saves
// (.keras, .weights.h5, training-state backups, checkpoints) write through it, so a save needs no copy of all
// weights or optimizer state, and an OOM while saving names the file (docs/memory.md, "Saving and loading").
// Loading goes the other way (read_file_into): a dataset's bytes from the HDF5 helper's data file straight into its
// destination, or through one staging buffer into a GPU's memory.
//
//   tk::io::for_each_piece(slot, "m.keras", "dense/kernel/slot0", [&](const void* p, size_t n) { write(p, n); });
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainkit/core/tensor.h"

namespace tk::io {

// The largest staging buffer a file operation holds (a tensor larger than this streams through it in pieces).
inline constexpr size_t kFileStagingBytes = size_t{4} << 20;

// The staging buffer's size now (kFileStagingBytes unless set): `trainkit fit --save` retries a save that ran out of
// memory with the smallest, kMinFileStagingBytes. Process-wide.
inline constexpr size_t kMinFileStagingBytes = size_t{64} << 10;
size_t file_staging_capacity();
void set_file_staging_capacity(size_t bytes);

// Bytes `t` needs staged to be written: 0 for a tensor in host memory (written from its own memory), else
// min(its bytes, file_staging_capacity()).
size_t file_staging_bytes(const Tensor& t);

// The owner tag of memory a file operation holds for one tensor: "<file>: <what> <tensor>".
std::string file_owner(const std::string& file, const std::string& what, const std::string& tensor);

// A staging buffer of `bytes` on the host for copies to or from `device`'s memory: a cpu tensor charged to the cpu's
// budget under the owner tag "<file>: staging for <tensor>" (so the plan's file-staging line counts it), page-locked
// by `device`'s backend while it lives (graph::Backend::pin_host: CUDA's cudaHostRegister) so the copies go by DMA.
// Every file operation's staging buffer is one of these.
// How: set_host_pinning, called when the backends are registered (backends/backends.cpp); never set in the HDF5
// helper process, which has no backends and stages nothing for a device.
struct HostPinning {
  bool (*pin)(Device device, void* p, size_t bytes);  // graph::Backend::pin_host of device's backend
  void (*unpin)(Device device, void* p);
};
const HostPinning* set_host_pinning(const HostPinning* pinning);  // a static object; returns the one before

class StagingBuffer {
 public:
  StagingBuffer(size_t bytes, Device device, const std::string& file, const std::string& tensor);
  ~StagingBuffer();  // unpins, then frees
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  void* data() { return buffer_.raw(); }
  size_t bytes() const { return buffer_.nbytes(); }
  // Whether the backend page-locked it (false for the cpu, or when the backend refused: the copies are then slower).
  bool pinned() const { return pinned_; }

 private:
  Tensor buffer_;  // (bytes) u8 on the cpu
  Device device_;
  bool pinned_ = false;
};

// Byte ranges of one tensor for a file, at most capacity() at a time: pointers into its own memory for a host tensor
// (capacity 0: the whole tensor); for a device tensor, copies into one staging buffer of min(its bytes, capacity)
// allocated on first use (and freed with the reader; capacity 0: file_staging_capacity()).
class TensorBytes {
 public:
  TensorBytes(const Tensor& t, std::string file, std::string tensor, size_t capacity = 0);
  // Bytes [offset, offset + n) of the tensor, valid until the next call; n <= capacity() for a device tensor.
  const void* range(size_t offset, size_t n);
  // The most bytes one range() may ask for.
  size_t capacity() const { return capacity_; }

 private:
  const Tensor& t_;
  std::string file_, tensor_;
  size_t capacity_;
  std::unique_ptr<StagingBuffer> staging_;  // for a device tensor, made on first use
};

// Calls `piece(bytes, n)` over the tensor's bytes in order: once, from its own memory, for a host tensor; in pieces
// of at most `piece_bytes` (rounded down to whole elements) through one staging buffer for a device tensor.
// `piece_bytes` 0: file_staging_capacity().
void for_each_piece(const Tensor& t, const std::string& file, const std::string& tensor,
                    const std::function<void(const void*, size_t)>& piece, size_t piece_bytes = 0);

// Fills `dst` with dst.nbytes() bytes of the file `fd` from `offset`: straight into a host tensor's own memory, or
// in pieces through one staging buffer of min(its bytes, file_staging_capacity()) into a device tensor (owner tag
// "<file>: staging for <tensor>"). IoError naming `file` and `tensor` when the file cannot be read or ends early.
void read_file_into(int fd, uint64_t offset, Tensor& dst, const std::string& file, const std::string& tensor);

}  // namespace tk::io
