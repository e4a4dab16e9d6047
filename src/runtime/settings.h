// The registry of trainkit's environment variables: every TK_* variable the library and the CLI read is one row of
// one table (settings_table.cpp) with its name, type, allowed values, default, meaning and the subsystem that reads
// it, and every read goes through the accessors below (`grep -rn getenv src` finds only settings.cpp and the
// non-TK variables: HOME, XDG_*, CUDA_VISIBLE_DEVICES, the MPI launchers'). `trainkit env` prints them all with
// their current values; docs/settings.md is generated from the same table (tests/test_settings.cpp checks it).
//
//   if (!runtime::setting_bool_or_default(runtime::Setting::fuse)) return;          // TK_FUSE=0: off
//   const double s = runtime::setting_number_or_default(runtime::Setting::collective_timeout);  // 300 when unset
//   if (auto policy = runtime::setting_choice(runtime::Setting::auto_shard)) ...   // "AUTO", "DATA" or "OFF"
//
// Each accessor reads the environment when it is called; a caller that decides once per process keeps the value in
// a static of its own (as TK_DETERMINISTIC and the GEMM engine do). A value the variable's type does not allow is an
// InvalidArgument naming the variable, the value and what it may be ("strict" rows), or reads as the default
// ("lenient" rows: the variables whose readers have always ignored what they do not know). Test hooks (TK_TEST_*)
// are rows too, flagged test_only, and are read only through runtime/test_hooks.h.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tk::runtime {

// One per variable, in the table's order (grouped by subsystem). Adding one: a name here and a row in
// settings_table.cpp (the build fails until both exist), then `trainkit env --markdown` into docs/settings.md.
enum class Setting : int {
  // runtime: devices, memory, leases, determinism
  visible_devices,
  nvml_library,
  memory_limit,
  memory_fraction,
  memory_growth,
  lease,
  lease_dir,
  lease_wait,
  lease_inherited,
  deterministic,
  cpp_min_log_level,
  // graph
  fuse,
  fuse_bias_grad,
  cuda_graphs,
  profile,
  // backends/cpu
  threads,
  gemm,
  gemm_cache,
  conv,
  conv_c1,
  // backends/cuda
  allow_tf32,
  cuda_native16,
  cudnn,
  cudnn_library,
  // nn/training
  log_lag,
  trainkit,
  // nn/distribute
  collective_timeout,
  bytes_per_pack,
  allreduce_overlap,
  auto_shard,
  // data
  fashion_mnist_dir,
  hdf5_helper,
  hdf5_helper_stderr,
  // test hooks (runtime/test_hooks.h)
  test_fault,
  test_crash_at,
  count
};
inline constexpr int kSettingCount = static_cast<int>(Setting::count);

enum class SettingType {
  boolean,  // values: "ON WORDS / OFF WORDS" ("*": any other non-empty value)
  integer,  // values: what is allowed, in words
  bytes,    // a byte size with or without a unit (config::parse_bytes): 512MB, 1.5GiB, 1073741824
  number,   // a decimal number between min_exclusive and max_inclusive
  text,     // any text (a name, a list); values says what it holds
  path,     // a file or folder
  choice,   // one of the space-separated words in values
};

struct SettingInfo {
  Setting id;
  const char* name;  // "TK_FUSE"
  SettingType type;
  const char* values;      // what the variable may hold (see SettingType)
  const char* fallback;    // the default: what unset (or empty) means; the accessors' `_or_default` parse it
  const char* subsystem;   // where it is read: a source folder ("graph", "backends/cpu", ...)
  const char* meaning;     // one line
  bool strict = false;     // a value outside `values` is an InvalidArgument (else it reads as the default)
  bool test_only = false;  // a test hook: read through runtime/test_hooks.h only
  bool any_case = false;   // choice words match in any case
  double min_exclusive = -1e300, max_inclusive = 1e300;  // number and bytes
};

std::span<const SettingInfo> all_settings();  // the table, grouped by subsystem
const SettingInfo& setting_info(Setting id);
const SettingInfo* find_setting(std::string_view name);  // nullptr: not one of trainkit's variables
const char* type_name(SettingType type);                 // "boolean", "bytes", ...
std::string allowed_text(const SettingInfo& s);          // "one of 1, true, 0, false", "a byte size, e.g. 25MiB"

// ---- reading the environment (nullopt: unset or empty, or a lenient row's unknown value)
const char* setting_raw(Setting id);  // getenv's answer: nullptr when unset (for readers that tell "" from unset)
std::optional<std::string> setting_text(Setting id);
std::optional<bool> setting_bool(Setting id);
std::optional<std::string> setting_choice(Setting id);  // the word as the table spells it
std::optional<double> setting_number(Setting id);
std::optional<size_t> setting_bytes(Setting id);
bool setting_bool_or_default(Setting id);
double setting_number_or_default(Setting id);
size_t setting_bytes_or_default(Setting id);

// ---- parsing a value given as text (the same rules; for pure functions that take the value as an argument)
std::optional<bool> parse_setting_bool(Setting id, std::string_view value);
std::optional<std::string> parse_setting_choice(Setting id, std::string_view value);
std::optional<double> parse_setting_number(Setting id, std::string_view value);
std::optional<size_t> parse_setting_bytes(Setting id, std::string_view value);

// InvalidArgument "TK_X='value' must be <allowed> [(why)]; unset it for the default (<fallback>). TK_X: <meaning>".
[[noreturn]] void throw_bad_setting(Setting id, std::string_view value, const std::string& why = "");
// What `trainkit env` shows of a variable, test hooks included (reading one here changes nothing in the program).
struct SettingState {
  const char* value = nullptr;  // getenv's answer: nullptr when unset
  std::string problem;          // "" when unset or valid; else the InvalidArgument message an accessor would throw
};
SettingState inspect_setting(Setting id);

}  // namespace tk::runtime
