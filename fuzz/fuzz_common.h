// Shared by the libFuzzer targets: writes the input to a per-process temporary file (the readers take
// paths) and removes it at exit.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainkit/core/tensor.h"

namespace tk::fuzz {

// Reads every byte, so that a tensor smaller than its shape claims shows up under AddressSanitizer.
inline void touch(const Tensor& t) {
  volatile uint8_t sink = 0;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) sink = static_cast<uint8_t>(sink ^ p[i]);
}

// One file per process and suffix; removed at exit.
inline std::string temp_path(const char* suffix) {
  const std::string path = "/tmp/tk_fuzz_" + std::to_string(getpid()) + suffix;
  static bool registered = false;
  static std::string* paths = new std::string;  // never destroyed: the atexit hook still reads it
  if (paths->find(path + '\n') == std::string::npos) *paths += path + '\n';
  if (!registered) {
    registered = true;
    std::atexit([] {
      size_t start = 0;
      for (size_t end; (end = paths->find('\n', start)) != std::string::npos; start = end + 1)
        std::remove(paths->substr(start, end - start).c_str());
    });
  }
  return path;
}

// Writes the input to a fresh file (removed first: rewriting a file in place makes ext4 flush it on close,
// which slowed fuzzing 7x).
inline std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = temp_path(suffix);
  std::remove(path.c_str());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("fuzz: cannot write " + path).c_str());
    std::abort();  // a harness failure, not a finding, but it must not pass silently
  }
  return path;
}

}  // namespace tk::fuzz
