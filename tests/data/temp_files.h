// One temporary directory per test process for the data tests (ctest runs tests in parallel processes),
// removed when the run ends.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tk::test {

inline const std::filesystem::path& temp_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::path(::testing::TempDir()) / ("tk_data_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

class RemoveTempDir : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir(), ec);
  }
};
inline const auto* const kRemoveTempDir = ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

inline std::string temp_path(const std::string& name) { return (temp_dir() / name).string(); }

}  // namespace tk::test
