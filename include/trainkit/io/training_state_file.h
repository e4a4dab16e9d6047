// A TrainingState (weights, optimizer state, counters, data position) as one self-checking file: what
// BackupAndRestore writes. One file, written atomically, so a crash never leaves weights from one step next
// to optimizer state or a position from another (Keras' BackupAndRestore keeps weights and the epoch in two
// files that can disagree after a crash).
//
//   tk::io::save_training_state("backup/latest.tkstate", model.training_state());
//   model.restore_training_state(tk::io::load_training_state("backup/latest.tkstate"));
//
// Layout (little-endian): "TKSTATE\n", u32 version (3: with the dtype policy and the loss-scale state; 2 is still
// read, as float32 without loss scaling), u64 payload bytes, payload, u32 CRC32C of the payload. The payload holds
// strings (u32 length + bytes), counters, and tensors (name, dtype, rank, dims, raw data). A damaged file is a
// FormatError naming the file and the byte offset; nothing is half-loaded.
#pragma once
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "trainkit/nn/training_state.h"

namespace tk::io {

inline constexpr uint32_t kTrainingStateVersion = 3;
// The oldest version decode_training_state reads (2: before mixed precision). It decodes to what a version-3
// file would hold (float32, no loss scaling) and encodes as version 3.
inline constexpr uint32_t kOldestTrainingStateVersion = 2;

void save_training_state(const std::filesystem::path& path, const TrainingState& state);
TrainingState load_training_state(const std::filesystem::path& path);

// The same, in memory (`name` is the file name used in error messages).
std::vector<std::byte> encode_training_state(const TrainingState& state);
TrainingState decode_training_state(std::span<const std::byte> bytes, const std::string& name);

}  // namespace tk::io
