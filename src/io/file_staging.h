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
  Tensor staging_;  // (capacity_) u8 on the cpu, for a device tensor
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
