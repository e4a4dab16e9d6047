// README.md is true: every `$ ./build/trainkit ...` example in it runs, as written, and succeeds. The examples
// run in a scratch folder holding the files they name (a.idx.gz, train.csv, train.h5, ...: small copies of the
// test data) with TK_FASHION_MNIST_DIR pointing at a 64-image stand-in for Fashion-MNIST, so the default jobs
// (10 epochs, the CNN) take seconds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)
namespace fs = std::filesystem;

// The README's CLI examples: the lines "$ ./build/trainkit ..." without their trailing "# comment".
std::vector<std::string> readme_examples() {
  std::ifstream in(std::string(TK_SOURCE_DIR) + "/README.md");
  std::vector<std::string> out;
  const std::string prefix = "$ ./build/trainkit ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::string args = line.substr(prefix.size());
    if (const size_t hash = args.find(" #"); hash != std::string::npos) args.resize(hash);
    while (!args.empty() && args.back() == ' ') args.pop_back();
    out.push_back(args);
  }
  return out;
}

// The files the examples name, in `dir`; a Fashion-MNIST stand-in in dir/fashion.
void write_example_files(const fs::path& dir) {
  fs::create_directories(dir / "fashion");
  const Split train = make_split(64, 11), test = make_split(32, 12);
  auto put = [](const fs::path& p, const Bytes& b) {
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<long>(b.size()));
  };
  put(dir / "fashion" / "train-images-idx3-ubyte", train.images);
  put(dir / "fashion" / "train-labels-idx1-ubyte", train.labels);
  put(dir / "fashion" / "t10k-images-idx3-ubyte", test.images);
  put(dir / "fashion" / "t10k-labels-idx1-ubyte", test.labels);
  fs::copy_file(write_gz("readme_a.idx.gz", train.images), dir / "a.idx.gz", fs::copy_options::overwrite_existing);
  fs::copy_file(write_gz("readme_b.idx.gz", train.labels), dir / "b.idx.gz", fs::copy_options::overwrite_existing);
  put(dir / "c.idx", test.images);
  put(dir / "d.idx", test.labels);
  const fs::path cli = fs::path(TK_SOURCE_DIR) / "tests" / "fixtures" / "data" / "cli";
  for (const char* name : {"train.csv", "test.csv", "train.npz", "test.npz"})
    fs::copy_file(cli / name, dir / name, fs::copy_options::overwrite_existing);
  fs::copy_file(cli / "grouped.h5", dir / "train.h5", fs::copy_options::overwrite_existing);  // /train/x, /train/y
  // `trainkit run ... -- python train.py`: a stand-in `python` (first on PATH) that runs train.py with sh, and a
  // train.py that shows what the leasing parent set for it.
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin" / "python") << "#!/bin/sh\nexec /bin/sh \"$@\"\n";
  fs::permissions(dir / "bin" / "python", fs::perms::owner_all);
  std::ofstream(dir / "train.py") << "echo \"train.py ran: TK_MEMORY_LIMIT=$TK_MEMORY_LIMIT "
                                     "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n";
}

TEST(Readme, EveryCliExampleRunsAsWritten) {
  // ~6-12 s (10 epochs of the CNN among them): the Release CI runs it as the ctest `readme_cli_examples`
  // (label slow); the sanitizer pass skips it.
  const char* slow = std::getenv("TK_SLOW_TESTS");
  if (!slow || std::string(slow) != "1") GTEST_SKIP() << "runs every README example; set TK_SLOW_TESTS=1";
  const std::vector<std::string> examples = readme_examples();
  ASSERT_GE(examples.size(), 8u) << "README.md's CLI examples were not found";
  const fs::path dir = fs::path(path_of("readme"));
  write_example_files(dir);
  // m.keras, the Keras model the examples resume, evaluate and summarize: 4 features, 2 classes, like train.npz.
  const Result made =
      run_cli("fit --data " + quote((dir / "train.npz").string()) +
              " --model dense:8:relu,dense:2 --epochs 1 -v 0 --save " + quote((dir / "m.keras").string()));
  ASSERT_EQ(made.code, 0) << describe(made);
  for (const std::string& args : examples) {
    SCOPED_TRACE(args);
    const Result r = run_cli(args, "cd " + quote(dir.string()) + " && PATH=" + quote((dir / "bin").string()) +
                                       ":\"$PATH\" TK_FASHION_MNIST_DIR=" + quote((dir / "fashion").string()));
    ASSERT_EQ(r.code, 0) << describe(r);
    if (args.find("--help") != std::string::npos) {
      EXPECT_CONTAINS(r.out, "Usage");
      continue;
    }
    if (args.rfind("jobs", 0) == 0) {  // the ledger's listing
      EXPECT_CONTAINS(r.out, "lease ledger: ");
      continue;
    }
    if (args.rfind("env", 0) == 0) {  // the settings registry's variables
      EXPECT_CONTAINS(r.out, "TK_FASHION_MNIST_DIR=" + (dir / "fashion").string());
      EXPECT_CONTAINS(r.out, "[environment]");
      continue;
    }
    if (args.rfind("summary ", 0) == 0) {
      EXPECT_CONTAINS(r.out, "Total params");
      continue;
    }
    if (args.rfind("evaluate ", 0) == 0) {
      EXPECT_CONTAINS(r.out, "loss");
      continue;
    }
    if (args.rfind("run ", 0) == 0) {  // the job ran under its lease, with the limit in its environment (8 GiB)
      EXPECT_CONTAINS(r.out, "train.py ran: TK_MEMORY_LIMIT=8589934592 ");
      continue;
    }
    EXPECT_CONTAINS(r.out, "peak memory: ");
    if (args.find("fit") == 0 &&
        (args.find("--data ") == std::string::npos || args.find("--validation-data") != std::string::npos))
      EXPECT_CONTAINS(r.out, "test_accuracy: ");
  }
}

// "Every epoch line ends with how long the step waited for input": with --data (a Dataset) it does.
TEST(Readme, EpochLinesOfAFileShowTheInputWait) {
  const Result r = run_cli("fit --data " + quote(std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/cli/train.npz") +
                           " --model dense:8:relu,dense:2 --epochs 2 -v 2 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  size_t lines = 0;
  for (size_t at = r.out.find("/step"); at != std::string::npos; at = r.out.find("/step", at + 1)) ++lines;
  size_t waits = 0;
  for (size_t at = r.out.find(" - input wait: "); at != std::string::npos; at = r.out.find(" - input wait: ", at + 1))
    ++waits;
  EXPECT_EQ(lines, 2u) << r.out;
  EXPECT_EQ(waits, 2u) << r.out;
}

// No doc, script or fixture header names one machine's folders (a venv is `.venv`, at the repository root).
TEST(Readme, NoMachinePathsInDocsScriptsOrFixtureHeaders) {
  const fs::path root(TK_SOURCE_DIR);
  std::vector<std::string> found;
  auto scan = [&](const fs::path& file) {
    const std::string ext = file.extension().string();
    if (ext != ".md" && ext != ".py" && ext != ".sh" && ext != ".txt" && ext != ".cpp" && ext != ".h" &&
        ext != ".cmake" && file.filename() != "CMakeLists.txt")
      return;
    std::ifstream in(file);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (line.size() > 2000) continue;  // fixture values, not prose
      for (const char* bad : {"/work/", "/home/", "/root/"})
        if (line.find(bad) != std::string::npos) found.push_back(file.string() + ":" + std::to_string(n) + ": " + line);
    }
  };
  for (const char* top : {"README.md", "CONTRIBUTING.md"}) scan(root / top);
  for (const char* sub : {"docs", "bench", "tools", "tests", "examples"})
    for (const auto& e : fs::recursive_directory_iterator(root / sub))
      if (e.is_regular_file() && e.path().filename() != "test_readme.cpp") scan(e.path());  // this file names them
  EXPECT_TRUE(found.empty()) << found.size() << " lines, the first: " << (found.empty() ? "" : found[0]);
}

}  // namespace
