// libFuzzer target for the training-state file (tk::io::decode_training_state; run: bash tools/run_fuzz.sh
// fuzz_tkstate). A tk::Error is the expected answer to bad bytes; anything else escaping, a crash, a sanitizer
// report or an allocation past -rss_limit_mb (a size taken from the header before checking the bytes exist)
// is a finding. Seeds: fuzz/corpus/fuzz_tkstate/tiny.tkstate (kept current by TrainingStateFile.SeedCorpus) and
// tiny_v2.tkstate (format version 2, still read).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "fuzz_common.h"
#include "trainkit/core/error.h"
#include "trainkit/io/training_state_file.h"

using tk::fuzz::touch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tk::TrainingState s =
        tk::io::decode_training_state(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.tkstate");
    for (const tk::Tensor& t : s.weights) touch(t);
    for (const tk::Tensor& t : s.optimizer_slots) touch(t);
    // What decodes must encode back to the same bytes (an older version is written as the current one: it must
    // decode again to the same encoding).
    const std::vector<std::byte> again = tk::io::encode_training_state(s);
    uint32_t version = 0;
    std::memcpy(&version, data + 8, sizeof version);  // little-endian hosts only, as the fuzz build
    if (version == tk::io::kTrainingStateVersion) {
      if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
    } else if (tk::io::encode_training_state(tk::io::decode_training_state(again, "again.tkstate")) != again) {
      __builtin_trap();
    }
  } catch (const tk::Error&) {
  }
  return 0;
}
