// libFuzzer target for what trainkit parses of a .keras file in its own process: the zip (libzip, member
// CRCs), metadata.json's version check, config.json as JSON, and the HDF5 helper's answer (parse_h5_tree).
// The first byte picks: even -> the rest is a .keras archive; odd -> the rest is a helper answer.
// libhdf5 itself runs in the helper process (src/data/hdf5_isolation.h), so it is not fuzzed here (fuzz_hdf5
// fuzzes the dataset reader in-process); building models from configs is swept by
// tests/test_keras_bad_input.cpp (MutationSweepOnlyEverThrowsTkError), which needs the whole library.
// Seeds: fuzz/corpus/fuzz_keras/ (a Keras 3.15.1 Dense model with its weights member cut short, stored and
// deflated, and a helper answer for its weights).
// fuzz-sources: src/io/keras_archive.cpp src/io/hdf5_tree.cpp
#include <cstdint>
#include <string>

#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "trainkit/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const char* rest = reinterpret_cast<const char*>(data + 1);
  try {
    if (data[0] % 2 == 0) {
      tk::io::keras::Archive a = tk::io::keras::read_archive_bytes("fuzz.keras", rest, size - 1);
      tk::io::keras::check_metadata(a.metadata, "fuzz.keras");
      tk::io::keras::parse_json(a.config, "fuzz.keras: config.json");
    } else {
      tk::io::H5Tree t = tk::io::parse_h5_tree(std::string(rest, size - 1), "fuzz");
      for (const auto& [path, v] : t.datasets) (void)t.children(path);
    }
  } catch (const tk::Error&) {
  }
  return 0;
}
