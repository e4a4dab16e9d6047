// Running the `trainkit` CLI (TK_CLI_PATH) as a separate process from a test, and the small IDX files it trains
// on: shared by tests/test_cli.cpp and tests/test_cli_flags.cpp.
//
//   Result r = run_cli("fit" + plain_data().args() + " --epochs 1 -v 0");
//   ASSERT_EQ(r.code, 0) << describe(r);
//   expect_user_error(run_cli("fit --x a"), {"--x"});   // exit 1, one "trainkit: error:" line naming --x
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tk_cli_test {

using Bytes = std::vector<uint8_t>;

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(contains((haystack), (needle))) << "expected to find \"" << (needle) << "\" in:\n" << (haystack)

// One directory per process (ctest may run tests in parallel), removed when the run ends.
inline const std::filesystem::path& cli_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::path(::testing::TempDir()) / ("tk_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

class RemoveCliDir : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(cli_dir(), ec);
  }
};
inline const auto* const kRemoveCliDir = ::testing::AddGlobalTestEnvironment(new RemoveCliDir);

inline std::string path_of(const std::string& name) { return (cli_dir() / name).string(); }

inline std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------- IDX files

inline Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline std::string write_file(const std::string& name, const Bytes& bytes) {
  const std::string path = path_of(name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return path;
  if (!bytes.empty()) {
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  }
  std::fclose(f);
  return path;
}

inline std::string write_gz(const std::string& name, const Bytes& bytes) {
  const std::string path = path_of(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return path;
  EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

inline Bytes read_bytes(const std::string& path) {
  std::string s = read_text(path);
  return Bytes(s.begin(), s.end());
}

// Images whose class is easy to read: class k lights up rows 2k..2k+1, on top of mild noise.
struct Split {
  Bytes images, labels;  // complete IDX files
};
inline Split make_split(uint32_t n, uint32_t seed, int label_modulo = 10) {
  std::mt19937 gen(seed);
  Bytes pixels(static_cast<size_t>(n) * 28 * 28), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % static_cast<uint32_t>(label_modulo));
    labels[i] = static_cast<uint8_t>(label);
    uint8_t* img = pixels.data() + static_cast<size_t>(i) * 28 * 28;
    for (int p = 0; p < 28 * 28; ++p) img[p] = static_cast<uint8_t>(gen() % 40);
    const int cls = label % 10;
    for (int r = 2 * cls; r < 2 * cls + 2; ++r)
      for (int c = 2; c < 26; ++c) img[r * 28 + c] = static_cast<uint8_t>(200 + gen() % 56);
  }
  return {idx_bytes({n, 28, 28}, pixels), idx_bytes({n}, labels)};
}

struct DataFiles {
  std::string train_images, train_labels, test_images, test_labels;
  std::string args() const {
    return " --train-images " + quote(train_images) + " --train-labels " + quote(train_labels) + " --test-images " +
           quote(test_images) + " --test-labels " + quote(test_labels);
  }
};

// Plain files: 256 training and 64 test samples, labels 0..9 (written once per process).
inline const DataFiles& plain_data() {
  static const DataFiles files = [] {
    Split train = make_split(256, 1), test = make_split(64, 2);
    return DataFiles{write_file("train-images", train.images), write_file("train-labels", train.labels),
                     write_file("test-images", test.images), write_file("test-labels", test.labels)};
  }();
  return files;
}

// The same kind of data, gzipped.
inline const DataFiles& gz_data() {
  static const DataFiles files = [] {
    Split train = make_split(256, 3), test = make_split(64, 4);
    return DataFiles{write_gz("train-images.gz", train.images), write_gz("train-labels.gz", train.labels),
                     write_gz("test-images.gz", test.images), write_gz("test-labels.gz", test.labels)};
  }();
  return files;
}

// ---------------------------------------------------------------- running the CLI

struct Result {
  bool exited = false;  // normal exit (not killed by a signal)
  int code = -1;        // exit status
  std::string out, err;
  std::vector<std::string> error_lines;  // stderr lines starting "trainkit: error:"
  int stderr_lines = 0;
};

// `env`: variable assignments put before the command, e.g. "TK_MEMORY_LIMIT=20MiB".
inline Result run_cli(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const std::string id = std::to_string(counter++);
  const std::string out = path_of("stdout_" + id), err = path_of("stderr_" + id);
  const std::string cmd =
      env + " " + quote(TK_CLI_PATH) + " " + args + " >" + quote(out) + " 2>" + quote(err) + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.exited = status != -1 && WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    ++r.stderr_lines;
    if (line.rfind("trainkit: error:", 0) == 0) r.error_lines.push_back(line);
  }
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

inline std::string describe(const Result& r) {
  return "exit " + std::to_string(r.code) + (r.exited ? "" : " (killed)") + "\n--- stdout:\n" + r.out +
         "--- stderr:\n" + r.err;
}

// A user mistake: exit status 1, exactly one "trainkit: error:" line on stderr and nothing else there,
// no crash, and the line names every `needles` item.
inline void expect_user_error(const Result& r, const std::vector<std::string>& needles) {
  EXPECT_TRUE(r.exited) << describe(r);
  EXPECT_NE(r.code, 0) << describe(r);
  EXPECT_LT(r.code, 128) << describe(r);
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_FALSE(contains(r.out + r.err, "Aborted")) << describe(r);
  EXPECT_FALSE(contains(r.out + r.err, "Segmentation")) << describe(r);
  EXPECT_FALSE(contains(r.err, "internal error")) << describe(r);
  ASSERT_EQ(r.error_lines.size(), 1u) << describe(r);
  EXPECT_EQ(r.stderr_lines, 1) << describe(r);
  for (const std::string& n : needles) EXPECT_CONTAINS(r.error_lines[0], n);
}

// A wrong command line (argparse's convention): exit status 2, on stderr exactly one "trainkit: error:" line
// naming every `needles` item and a second line pointing at `command`'s help, nothing on stdout.
inline void expect_usage_error(const Result& r, const std::vector<std::string>& needles, const std::string& command) {
  EXPECT_TRUE(r.exited) << describe(r);
  EXPECT_EQ(r.code, 2) << describe(r);
  ASSERT_EQ(r.error_lines.size(), 1u) << describe(r);
  EXPECT_EQ(r.stderr_lines, 2) << describe(r);
  EXPECT_CONTAINS(r.err, "\nRun '" + command + " --help' for usage.\n");
  for (const std::string& n : needles) EXPECT_CONTAINS(r.error_lines[0], n);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

// Parses "test_accuracy: 0.1234" from stdout; -1 when absent.
inline double test_accuracy(const std::string& out) {
  const std::string key = "test_accuracy: ";
  size_t p = out.find(key);
  if (p == std::string::npos) return -1.0;
  return std::strtod(out.c_str() + p + key.size(), nullptr);
}

}  // namespace tk_cli_test
