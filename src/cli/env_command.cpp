// `trainkit env`: every TK_* variable trainkit reads (the settings registry, runtime/settings.h), one per line and
// grouped by the subsystem that reads it, with its current value, where that value comes from and what it means:
//
//   runtime
//     TK_MEMORY_LIMIT=512MiB   [environment]  each device's memory budget, in bytes (not with TK_MEMORY_FRACTION)
//     TK_MEMORY_GROWTH=true    [default]      true: take device memory as needed; false: reserve the whole ...
//
// A value the variable does not allow is marked "[environment, invalid: ...]" with the error trainkit would stop
// with. `trainkit env --markdown` prints the table of docs/settings.md instead.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "runtime/settings.h"
#include "runtime/settings_doc.h"

namespace tk::cli {
namespace {

struct Line {
  std::string assignment, source;
};

Line line_of(const runtime::SettingInfo& s) {
  const runtime::SettingState state = runtime::inspect_setting(s.id);
  const std::string name = s.name;
  if (!state.value) return {name + "=" + s.fallback, "[default]"};
  if (!*state.value) return {name + "=", "[environment, empty: the default, " + std::string(s.fallback) + "]"};
  if (state.problem.empty()) return {name + "=" + state.value, "[environment]"};
  const std::string problem = state.problem.substr(0, state.problem.find(". " + name + ": "));  // the meaning follows
  return {name + "=" + state.value, "[environment, invalid: " + problem + "]"};
}

}  // namespace

void add_env_command(CLI::App& app, EnvArgs& args) {
  CLI::App* env = app.add_subcommand("env",
                                     "List the TK_* environment variables trainkit reads, grouped by subsystem: each "
                                     "one's value, whether it comes from the environment or is the default, and its "
                                     "meaning (docs/settings.md)");
  env->add_flag("--markdown", args.markdown, "Print the variables as the Markdown table of docs/settings.md");
}

int run_env(const EnvArgs& args) {
  if (args.markdown) {
    std::fputs(runtime::settings_markdown().c_str(), stdout);
    return 0;
  }
  size_t width = 0;
  for (const runtime::SettingInfo& s : runtime::all_settings()) width = std::max(width, line_of(s).assignment.size());
  width = std::min<size_t>(width, 48);  // a long default runs into the source column rather than pad every line
  std::string subsystem;
  for (const runtime::SettingInfo& s : runtime::all_settings()) {
    if (s.subsystem != subsystem) {
      std::printf("%s%s\n", subsystem.empty() ? "" : "\n", s.subsystem);
      subsystem = s.subsystem;
    }
    const Line l = line_of(s);
    std::printf("  %-*s  %s  %s\n", static_cast<int>(width), l.assignment.c_str(), l.source.c_str(), s.meaning);
  }
  return 0;
}

}  // namespace tk::cli
