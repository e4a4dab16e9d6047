// libFuzzer target for tk::data::load_npy and tk::data::load_npz (run: bash tools/run_fuzz.sh fuzz_npy).
//
// Every input is tried as both formats: an .npy seed mutates into bad .npy headers and data, an .npz seed
// into bad zip archives and bad members. A tk::Error is the expected answer to bad bytes; anything else
// escaping (std::bad_alloc, a crash, a sanitizer report, an allocation past -rss_limit_mb) is a finding.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "trainkit/core/error.h"
#include "trainkit/data/npy.h"

using tk::fuzz::touch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tk::fuzz::write_input(data, size, ".npy");
  try {
    touch(tk::data::load_npy(path));
  } catch (const tk::Error&) {
  }
  try {
    for (const auto& [key, tensor] : tk::data::load_npz(path)) touch(tensor);
  } catch (const tk::Error&) {
  }
  try {
    touch(tk::data::load_npz(path, "x"));
  } catch (const tk::Error&) {
  }
  return 0;
}
