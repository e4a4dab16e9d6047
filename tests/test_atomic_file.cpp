// tk::io::AtomicFile: a crash at each named point inside a write leaves the previous file whole and no
// temporary that survives remove_stale_temporaries().
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainkit/core/error.h"
#include "trainkit/io/atomic_file.h"

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tk_atomic_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_temporaries(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += tk::io::is_atomic_temporary(e.path()) ? 1 : 0;
  return n;
}

}  // namespace

TEST(AtomicFile, WritesAndReplaces) {
  const fs::path dir = fresh_dir("replace");
  tk::io::write_file_atomic(dir / "a.bin", std::string_view("first"));
  EXPECT_EQ(slurp(dir / "a.bin"), "first");
  tk::io::write_file_atomic(dir / "a.bin", std::string_view("second, longer"));
  EXPECT_EQ(slurp(dir / "a.bin"), "second, longer");
  EXPECT_EQ(count_temporaries(dir), 0);
  fs::remove_all(dir);
}

TEST(AtomicFile, UncommittedWriterLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = fresh_dir("abandon");
  tk::io::write_file_atomic(dir / "a.bin", std::string_view("old"));
  {
    tk::io::AtomicFile f(dir / "a.bin");
    std::ofstream(f.temp_path()) << "half";
    EXPECT_EQ(count_temporaries(dir), 1);
  }
  EXPECT_EQ(slurp(dir / "a.bin"), "old");
  EXPECT_EQ(count_temporaries(dir), 0);
  fs::remove_all(dir);
}

TEST(AtomicFile, ClearErrorsForAMissingFolderOrNoOutput) {
  const fs::path dir = fresh_dir("errors");
  try {
    tk::io::write_file_atomic(dir / "nope" / "a.bin", std::string_view("x"));
    FAIL() << "expected IoError";
  } catch (const tk::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  tk::io::AtomicFile f(dir / "b.bin");
  EXPECT_THROW(f.commit(), tk::IoError);  // the writer wrote nothing
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
  fs::remove_all(dir);
}

// A child process replaces "old" by "new" and SIGKILLs itself at `point`: the file holds exactly one of the two.
TEST(AtomicFile, KillAtEachCrashPointLeavesAWholeFile) {
  for (const char* point : {"before_fsync", "before_rename", "after_rename"}) {
    SCOPED_TRACE(point);
    const fs::path dir = fresh_dir(point);
    tk::io::write_file_atomic(dir / "ckpt", std::string_view("old"));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("TK_TEST_CRASH_AT", point, 1);
      try {
        tk::io::write_file_atomic(dir / "ckpt", std::string_view("new contents"));
      } catch (...) {
      }
      ::_exit(3);  // not reached: the hook kills the process
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    const std::string after = slurp(dir / "ckpt");
    if (std::string(point) == "after_rename") {
      EXPECT_EQ(after, "new contents");
      EXPECT_EQ(count_temporaries(dir), 0);
    } else {
      EXPECT_EQ(after, "old");
      EXPECT_EQ(count_temporaries(dir), 1);                 // the dead writer's temporary ...
      EXPECT_EQ(tk::io::remove_stale_temporaries(dir), 1);  // ... is recognised as stale and removed
      EXPECT_EQ(count_temporaries(dir), 0);
    }
    fs::remove_all(dir);
  }
}
