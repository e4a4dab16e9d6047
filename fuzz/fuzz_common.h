// Shared by the libFuzzer targets: writes the input to a per-process temporary file (the readers take
// paths) and removes it at exit.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tk::fuzz {

inline std::string temp_path(const char* suffix) {
  static const std::string path = "/tmp/tk_fuzz_" + std::to_string(getpid()) + suffix;
  static const bool registered = [] {
    std::atexit([] { std::remove(path.c_str()); });
    return true;
  }();
  (void)registered;
  return path;
}

inline std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = temp_path(suffix);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace tk::fuzz
