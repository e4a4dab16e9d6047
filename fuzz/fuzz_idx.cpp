// libFuzzer target for tk::data::load_idx (build and run: fuzz/README.md).
//
// load_idx reads a path, so each input goes to a file first. A documented trainkit error (tk::Error) is the
// expected outcome for bad bytes; anything else escaping (std::bad_alloc, a crash, a sanitizer report) is a
// finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainkit/core/error.h"
#include "trainkit/data/idx.h"

namespace {

// One file per process, reused for every input: creating a new name per input would litter /tmp, and the pid
// keeps parallel fuzzing jobs (-jobs=N) apart.
// Never destroyed, so the atexit hook that removes the file can still read it.
const std::string& input_path() {
  static const std::string* path = [] {
    auto* p = new std::string("/tmp/fuzz_idx_" + std::to_string(getpid()) + ".idx");
    std::atexit([] { std::remove(input_path().c_str()); });
    return p;
  }();
  return *path;
}

void write_input(const uint8_t* data, size_t size) {
  std::remove(input_path().c_str());  // a fresh file: rewriting in place makes ext4 flush on close (slow)
  std::FILE* f = std::fopen(input_path().c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("fuzz_idx: cannot write " + input_path()).c_str());
    std::abort();  // a harness failure, not a finding in load_idx, but it must not pass silently
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_input(data, size);
  try {
    tk::Tensor t = tk::data::load_idx(input_path());
    // Touch every byte so that a tensor smaller than its shape claims shows up under AddressSanitizer.
    volatile uint8_t sink = 0;
    const auto* p = static_cast<const uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) sink = static_cast<uint8_t>(sink ^ p[i]);
  } catch (const tk::Error&) {
  }
  return 0;
}
