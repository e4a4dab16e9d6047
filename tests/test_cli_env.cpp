// `trainkit env`, run as a separate process (TK_CLI_PATH): every variable of the settings registry once, grouped by
// subsystem, with its value and source; values from the environment, empty and invalid ones; --markdown; --help.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "runtime/settings.h"
#include "runtime/settings_doc.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)
using tk::runtime::all_settings;
using tk::runtime::SettingInfo;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The line of `name` ("  TK_X=value  [source]  meaning"); "" when there is none.
std::string line_for(const std::string& out, const std::string& name) {
  std::string found;
  for (const std::string& line : lines_of(out))
    if (line.rfind("  " + name + "=", 0) == 0) {
      EXPECT_EQ(found, "") << name << " listed twice";
      found = line;
    }
  return found;
}

TEST(CliEnv, HelpSaysWhatItPrints) {
  Result r = run_cli("env --help");
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "TK_* environment variables");
  EXPECT_CONTAINS(r.out, "--markdown");
  EXPECT_TRUE(r.err.empty()) << describe(r);
  Result top = run_cli("--help");
  EXPECT_CONTAINS(top.out, "env");
  EXPECT_FALSE(contains(top.out, "(CPU backend)")) << top.out;
  // The backends this build has: cuda only where the CUDA backend was compiled in (`trainkit devices` says which).
  const Result devices = run_cli("devices");
  const bool cuda_built = contains(devices.out + devices.err, "CUDA backend: built");
  EXPECT_CONTAINS(top.out,
                  cuda_built ? "backends in this build: cpu, cuda" : "backends in this build: cpu (built without CUDA");
}

TEST(CliEnv, ListsEveryVariableOnceGroupedBySubsystem) {
  Result r = run_cli("env", "env -u TK_FUSE -u TK_CUDA_GRAPHS -u TK_LOG_LAG");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.err.empty()) << describe(r);
  const std::vector<std::string> lines = lines_of(r.out);
  std::string subsystem;
  size_t listed = 0;
  for (const std::string& line : lines) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      subsystem = line;  // a group's heading: the subsystem that reads its variables
      continue;
    }
    const std::string name = line.substr(2, line.find('=') - 2);
    const SettingInfo* s = tk::runtime::find_setting(name);
    ASSERT_NE(s, nullptr) << "not a registered variable: " << line;
    EXPECT_EQ(subsystem, s->subsystem) << line;
    EXPECT_CONTAINS(line, s->meaning);
    ++listed;
  }
  EXPECT_EQ(listed, all_settings().size()) << r.out;
  for (const SettingInfo& s : all_settings()) EXPECT_NE(line_for(r.out, s.name), "") << s.name << " missing";
  // Unset: the default, said to be one.
  EXPECT_CONTAINS(line_for(r.out, "TK_FUSE"), "TK_FUSE=1");
  EXPECT_CONTAINS(line_for(r.out, "TK_FUSE"), "[default]");
  EXPECT_CONTAINS(line_for(r.out, "TK_LOG_LAG"), "TK_LOG_LAG=0 on the cpu, 1 on CUDA");
}

TEST(CliEnv, ShowsValuesFromTheEnvironmentAndFlagsBadOnes) {
  Result r = run_cli("env", "TK_FUSE=0 TK_MEMORY_LIMIT=20MiB TK_CUDA_GRAPHS= TK_LOG_LAG=2 TK_TEST_CRASH_AT=");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(line_for(r.out, "TK_FUSE"), "TK_FUSE=0");
  EXPECT_CONTAINS(line_for(r.out, "TK_FUSE"), "[environment]");
  EXPECT_CONTAINS(line_for(r.out, "TK_MEMORY_LIMIT"), "TK_MEMORY_LIMIT=20MiB");
  EXPECT_CONTAINS(line_for(r.out, "TK_MEMORY_LIMIT"), "[environment]");
  EXPECT_CONTAINS(line_for(r.out, "TK_CUDA_GRAPHS"), "[environment, empty: the default, 1]");
  const std::string lag = line_for(r.out, "TK_LOG_LAG");
  EXPECT_CONTAINS(lag, "[environment, invalid: TK_LOG_LAG='2' must be one of 0, 1");
  EXPECT_CONTAINS(line_for(r.out, "TK_TEST_CRASH_AT"), "test hook");
}

TEST(CliEnv, MarkdownIsTheDocsTable) {
  Result r = run_cli("env --markdown");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(r.out, tk::runtime::settings_markdown());
  expect_usage_error(run_cli("env --json"), {"--json"}, "trainkit env");
}

}  // namespace
