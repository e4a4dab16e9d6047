// The settings registry (src/runtime/settings.h): the table's shape, each type's parsing, the defaults, the errors
// of bad values, the test-hook seam; that no source file reads a TK_* variable behind its back; and that
// docs/settings.md is the registry's table (so the docs cannot drift from the code).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "graph/bucket.h"
#include "runtime/settings.h"
#include "runtime/settings_doc.h"
#include "runtime/test_hooks.h"
#include "trainkit/core/error.h"

namespace {

using tk::InvalidArgument;
using namespace tk::runtime;  // NOLINT(google-build-using-namespace)

// Sets (or unsets, with nullptr) a variable for one test and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Settings, OneRowPerVariableInEnumOrder) {
  ASSERT_EQ(all_settings().size(), static_cast<size_t>(kSettingCount));
  EXPECT_EQ(kSettingCount, 35) << "a variable was added or removed: update docs/settings.md (trainkit env --markdown)";
  std::set<std::string> names;
  for (int i = 0; i < kSettingCount; ++i) {
    const SettingInfo& s = all_settings()[static_cast<size_t>(i)];
    EXPECT_EQ(static_cast<int>(s.id), i);
    EXPECT_EQ(&setting_info(s.id), &s);
    EXPECT_EQ(std::string(s.name).rfind("TK_", 0), 0u) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
    EXPECT_EQ(find_setting(s.name), &s);
    for (const char* field : {s.values, s.fallback, s.subsystem, s.meaning}) {
      EXPECT_NE(std::string(field), "") << s.name;
      EXPECT_EQ(std::string(field).find('|'), std::string::npos) << s.name << ": a '|' breaks the docs' table";
    }
    // Test hooks are exactly the TK_TEST_* variables.
    EXPECT_EQ(s.test_only, std::string(s.name).rfind("TK_TEST_", 0) == 0) << s.name;
  }
  EXPECT_EQ(find_setting("TK_NO_SUCH_VARIABLE"), nullptr);
  EXPECT_EQ(find_setting("HOME"), nullptr);
}

TEST(Settings, RowsAreGroupedBySubsystem) {
  std::set<std::string> finished;
  std::string current;
  for (const SettingInfo& s : all_settings()) {
    if (s.subsystem == current) continue;
    EXPECT_EQ(finished.count(s.subsystem), 0u) << s.name << ": its subsystem " << s.subsystem << " came earlier";
    finished.insert(current);
    current = s.subsystem;
  }
}

TEST(Settings, BooleansKeepTheirReadersWords) {
  // Strict: the words listed, else an error naming the variable, the value and the words.
  EXPECT_EQ(parse_setting_bool(Setting::memory_growth, "False"), false);
  EXPECT_EQ(parse_setting_bool(Setting::memory_growth, "1"), true);
  EXPECT_EQ(parse_setting_bool(Setting::memory_growth, ""), std::nullopt);
  const std::string e = error_of([] { parse_setting_bool(Setting::deterministic, "yes"); });
  EXPECT_NE(e.find("TK_DETERMINISTIC='yes' must be one of 1, true, TRUE, True (on), 0, false, FALSE, False (off)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("unset it for the default (0)"), std::string::npos) << e;
  EXPECT_EQ(parse_setting_bool(Setting::allreduce_overlap, "on"), true);
  EXPECT_THROW(parse_setting_bool(Setting::allreduce_overlap, "maybe"), InvalidArgument);
  // Lenient: off only when "0" (TK_FUSE, TK_CUDA_GRAPHS, ...), on only when "1" (TK_ALLOW_TF32), off words (TK_LEASE).
  EXPECT_EQ(parse_setting_bool(Setting::fuse, "0"), false);
  EXPECT_EQ(parse_setting_bool(Setting::fuse, "false"), true);
  EXPECT_EQ(parse_setting_bool(Setting::allow_tf32, "1"), true);
  EXPECT_EQ(parse_setting_bool(Setting::allow_tf32, "true"), false);
  EXPECT_EQ(parse_setting_bool(Setting::profile, "0"), false);
  EXPECT_EQ(parse_setting_bool(Setting::profile, "yes"), true);
  EXPECT_EQ(parse_setting_bool(Setting::lease, "no"), false);
  EXPECT_EQ(parse_setting_bool(Setting::lease, "whatever"), true);
  EXPECT_EQ(parse_setting_bool(Setting::cudnn, "OFF"), false);
  EXPECT_EQ(parse_setting_bool(Setting::cudnn, "Off"), true) << "TK_CUDNN has always taken these five words only";
  EXPECT_THROW(parse_setting_bool(Setting::memory_limit, "1"), std::logic_error) << "not a boolean row";
}

TEST(Settings, ChoicesNumbersAndBytes) {
  EXPECT_EQ(parse_setting_choice(Setting::auto_shard, "data"), "DATA");
  const std::string shard = error_of([] { parse_setting_choice(Setting::auto_shard, "FILE"); });
  EXPECT_NE(shard.find("TK_AUTO_SHARD='FILE' must be one of AUTO, DATA, OFF (any case)"), std::string::npos) << shard;
  EXPECT_EQ(parse_setting_choice(Setting::log_lag, "1"), "1");
  EXPECT_NE(error_of([] { parse_setting_choice(Setting::log_lag, "2"); }).find("TK_LOG_LAG='2' must be one of 0, 1"),
            std::string::npos);
  EXPECT_EQ(parse_setting_choice(Setting::conv, "im2col"), "im2col");
  EXPECT_EQ(parse_setting_choice(Setting::conv, "IM2COL"), std::nullopt) << "lenient and case-sensitive";

  EXPECT_EQ(parse_setting_number(Setting::collective_timeout, "1.5"), 1.5);
  EXPECT_THROW(parse_setting_number(Setting::collective_timeout, "0"), InvalidArgument);
  EXPECT_THROW(parse_setting_number(Setting::collective_timeout, "5s"), InvalidArgument);
  EXPECT_EQ(parse_setting_number(Setting::memory_fraction, "1"), 1.0);
  const std::string fraction = error_of([] { parse_setting_number(Setting::memory_fraction, "2"); });
  EXPECT_NE(fraction.find("TK_MEMORY_FRACTION='2' must be a number in (0, 1]"), std::string::npos) << fraction;

  EXPECT_EQ(parse_setting_bytes(Setting::bytes_per_pack, "25MiB"), size_t{25} << 20);
  EXPECT_EQ(parse_setting_bytes(Setting::bytes_per_pack, "1"), size_t{1});
  EXPECT_THROW(parse_setting_bytes(Setting::bytes_per_pack, "0"), InvalidArgument) << "positive";
  EXPECT_EQ(parse_setting_bytes(Setting::memory_limit, "0"), size_t{0});
  const std::string unit = error_of([] { parse_setting_bytes(Setting::memory_limit, "1.5Gb"); });
  EXPECT_NE(unit.find("TK_MEMORY_LIMIT='1.5Gb' must be a byte size"), std::string::npos) << unit;
  EXPECT_NE(unit.find("unknown unit 'Gb'"), std::string::npos) << unit;
}

TEST(Settings, ReadsTheEnvironmentAtEachCall) {
  {
    ScopedEnv unset("TK_FUSE", nullptr);
    EXPECT_EQ(setting_raw(Setting::fuse), nullptr);
    EXPECT_EQ(setting_bool(Setting::fuse), std::nullopt);
    EXPECT_TRUE(setting_bool_or_default(Setting::fuse));
  }
  {
    ScopedEnv off("TK_FUSE", "0");
    EXPECT_FALSE(setting_bool_or_default(Setting::fuse));
  }
  {
    ScopedEnv empty("TK_LEASE_DIR", "");
    EXPECT_NE(setting_raw(Setting::lease_dir), nullptr);
    EXPECT_EQ(setting_text(Setting::lease_dir), std::nullopt) << "empty reads as unset";
  }
  {
    ScopedEnv bad("TK_COLLECTIVE_TIMEOUT", "soon");
    EXPECT_THROW(setting_number_or_default(Setting::collective_timeout), InvalidArgument);
    EXPECT_NE(inspect_setting(Setting::collective_timeout).problem.find("TK_COLLECTIVE_TIMEOUT='soon'"),
              std::string::npos);
  }
  ScopedEnv fine("TK_COLLECTIVE_TIMEOUT", "30");
  EXPECT_EQ(setting_number_or_default(Setting::collective_timeout), 30.0);
  EXPECT_EQ(inspect_setting(Setting::collective_timeout).problem, "");
}

// The defaults the API options fall back to (MirroredStrategy::Options) come from the table.
TEST(Settings, DefaultsComeFromTheTable) {
  ScopedEnv t("TK_COLLECTIVE_TIMEOUT", nullptr), b("TK_BYTES_PER_PACK", nullptr), g("TK_MEMORY_GROWTH", nullptr),
      d("TK_DETERMINISTIC", nullptr);
  EXPECT_EQ(setting_number_or_default(Setting::collective_timeout), 300.0);
  EXPECT_EQ(setting_bytes_or_default(Setting::bytes_per_pack), tk::graph::kDefaultBucketBytes)
      << "TK_BYTES_PER_PACK's default and the graph's bucket size are one number";
  EXPECT_TRUE(setting_bool_or_default(Setting::memory_growth));
  EXPECT_FALSE(setting_bool_or_default(Setting::deterministic));
  // Every boolean row's default is one of its words, except the overlap's, which depends on the collective.
  for (const SettingInfo& s : all_settings()) {
    if (s.type != SettingType::boolean || s.id == Setting::allreduce_overlap || s.test_only) continue;
    ScopedEnv unset(s.name, nullptr);
    EXPECT_NO_THROW(setting_bool_or_default(s.id)) << s.name << "'s default '" << s.fallback << "'";
  }
}

TEST(Settings, TestHooksEnterThroughOneFunction) {
  ScopedEnv f("TK_TEST_FAULT", "abort");
  EXPECT_STREQ(test_hook(Setting::test_fault), "abort");
  EXPECT_THROW(setting_raw(Setting::test_fault), std::logic_error) << "production readers cannot read a test hook";
  EXPECT_THROW(test_hook(Setting::fuse), std::logic_error) << "test_hook reads test hooks only";
  EXPECT_STREQ(inspect_setting(Setting::test_fault).value, "abort") << "trainkit env still shows it";
}

// No source file reads a TK_* variable with getenv: they all go through the registry.
TEST(Settings, NoGetenvOfTrainkitVariablesOutsideTheRegistry) {
  const std::regex direct(R"(getenv\s*\(\s*"TK_)");
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(TK_SOURCE_DIR) + "/src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
    if (e.path().filename() == "settings.cpp") continue;
    EXPECT_FALSE(std::regex_search(read_text(e.path()), direct))
        << e.path() << " reads a TK_* variable directly: add it to src/runtime/settings_table.cpp and read it there";
  }
}

// docs/settings.md holds the registry's table as `trainkit env --markdown` prints it, and names no other variable
// in a table row.
TEST(Settings, DocsListExactlyTheRegistry) {
  const std::string doc = read_text(std::string(TK_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_FALSE(doc.empty()) << "docs/settings.md is missing";
  EXPECT_NE(doc.find(settings_markdown()), std::string::npos)
      << "docs/settings.md does not hold the registry's table: regenerate it with `trainkit env --markdown`";
  std::set<std::string> documented, registered;
  std::istringstream lines(doc);
  const std::regex row(R"(^\| `(TK_[A-Z0-9_]+)`)");
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, row)) EXPECT_TRUE(documented.insert(m[1]).second) << m[1] << " twice";
  for (const SettingInfo& s : all_settings()) registered.insert(s.name);
  EXPECT_EQ(documented, registered);
}

}  // namespace
