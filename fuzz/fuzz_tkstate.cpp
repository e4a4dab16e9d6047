// libFuzzer target for the training-state file (tk::io::decode_training_state; run: bash tools/run_fuzz.sh
// fuzz_tkstate). A tk::Error is the expected answer to bad bytes; anything else escaping, a crash, a sanitizer
// report or an allocation past -rss_limit_mb (a size taken from the header before checking the bytes exist)
// is a finding. Seed: fuzz/corpus/fuzz_tkstate/tiny.tkstate (kept current by TrainingStateFile.SeedCorpus).
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
    // What decodes must encode back to the same bytes.
    const std::vector<std::byte> again = tk::io::encode_training_state(s);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  } catch (const tk::Error&) {
  }
  return 0;
}
