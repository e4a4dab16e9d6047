// docs/testing.md's claims about the tests themselves: no test asserts a wall-clock duration, and every mutation
// patch names the tests that must catch it (tools/mutation_check.sh reads those lines).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// A comparison of a clock reading (now() - t0, an `elapsed` or `*_ms` / `*_s` measurement) inside an assertion, or
// a shell test failing on a measured time. Sleeps and deadlines that only bound a wait are not assertions.
TEST(DocsTesting, NoTestAssertsAWallClockDuration) {
  const std::regex cpp(
      R"re((EXPECT|ASSERT)_(LT|LE|GT|GE|TRUE|FALSE)\([^;]*(steady_clock::now\(\)\s*-|system_clock::now\(\)\s*-|\belapsed\w*\s*[<>]|\bwall_s\b|\bseconds_taken\b))re");
  const std::regex sh(R"re(\[\s*"?\$\{?(elapsed|duration|took)\w*\}?"?\s+-(lt|le|gt|ge)\b)re");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(TK_SOURCE_DIR) / "tests")) {
    if (!e.is_regular_file() || e.path().string().find("/fixtures/") != std::string::npos) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".sh") continue;
    ++files;
    const std::string text = read(e.path());
    std::smatch m;
    if (std::regex_search(text, m, ext == ".sh" ? sh : cpp))
      ADD_FAILURE() << e.path() << " asserts a duration: " << m.str(0);
  }
  EXPECT_GT(files, 50);
}

TEST(DocsTesting, EveryMutationPatchSaysWhatItBreaksAndWhichTestsCatchIt) {
  int patches = 0;
  for (const auto& e : fs::directory_iterator(fs::path(TK_SOURCE_DIR) / "tools" / "mutations")) {
    if (e.path().extension() != ".patch") continue;
    ++patches;
    const std::string text = read(e.path());
    EXPECT_EQ(text.rfind("# mutation: ", 0), 0u) << e.path();
    EXPECT_NE(text.find("\n# tests: "), std::string::npos) << e.path();
    EXPECT_NE(text.find("\ndiff --git a/"), std::string::npos) << e.path();
  }
  EXPECT_GE(patches, 20);
}
