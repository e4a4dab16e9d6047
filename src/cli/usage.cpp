#include "cli/usage.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

namespace tk::cli {
namespace {

std::string lower_first(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "an integer" for CLI11's INT, ...; empty for text.
std::string kind_of(const CLI::Option* opt) {
  if (!opt) return {};
  const std::string t = opt->get_type_name();
  if (starts_with(t, "UINT")) return "a non-negative integer";
  if (starts_with(t, "INT")) return "an integer";
  if (starts_with(t, "FLOAT")) return "a number";
  return {};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean --epochs?)" when `word` is a near miss of one of cmd's long options.
std::string suggestion(const CLI::App& cmd, std::string word) {
  if (!starts_with(word, "--")) return {};
  word = word.substr(0, word.find('='));
  std::string best;
  size_t best_distance = 3;  // at most two edits
  for (const CLI::Option* opt : cmd.get_options())
    for (const std::string& name : opt->get_lnames()) {
      const size_t d = edit_distance(word, "--" + name);
      if (d < best_distance) best_distance = d, best = "--" + name;
    }
  return best.empty() ? std::string() : " (did you mean " + best + "?)";
}

std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + s->get_name();
  return names;
}

// One line saying what is wrong, in the user's terms (CLI11's own wording where it is already clear).
std::string describe(const CLI::App& app, const CLI::App& cmd, const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    const std::vector<std::string> extra = app.remaining(true);
    if (extra.empty()) return lower_first(what);
    std::string list;
    for (const std::string& s : extra) list += (list.empty() ? "" : " ") + s;
    return "unrecognized arguments: " + list + suggestion(cmd, extra[0]);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    // "Could not convert: --epochs = abc"
    const std::string prefix = "Could not convert: ";
    const size_t eq = what.find(" = ");
    if (starts_with(what, prefix) && eq != std::string::npos) {
      const std::string name = what.substr(prefix.size(), eq - prefix.size()), value = what.substr(eq + 3);
      const CLI::Option* opt = cmd.get_option_no_throw(name);
      const std::string kind = kind_of(opt);
      if (opt && opt->get_items_expected_max() > 1 && !kind.empty())  // e.g. --input-shape 28 x
        return name + ": every value must be " + kind + ", got '" + value + "'";
      return name + ": '" + value + "' is not " + (kind.empty() ? "a valid value" : kind);
    }
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    // "--epochs: 1 required INT missing": the option ended the command line
    const size_t colon = what.find(": ");
    if (colon != std::string::npos && what.find(" missing") != std::string::npos) {
      const std::string name = what.substr(0, colon);
      const std::string kind = kind_of(cmd.get_option_no_throw(name));
      return name + ": expected a value" + (kind.empty() ? "" : " (" + kind + ")");
    }
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e)) {
    // "--format: --format: unknown format ..." when the check's message already names the option
    const size_t colon = what.find(": ");
    if (colon != std::string::npos && what.compare(colon + 2, colon + 2, what, 0, colon + 2) == 0)
      return what.substr(colon + 2);
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && &cmd == &app && app.get_subcommands().empty())
    return "missing command (choose from " + subcommand_names(app) + ")";
  return lower_first(what);
}

}  // namespace

int report_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
  const CLI::App* cmd = &app;
  for (const CLI::App* s : app.get_subcommands()) cmd = s;  // the command being parsed when it failed
  const std::string command = cmd == &app ? app.get_name() : app.get_name() + " " + cmd->get_name();
  return usage_error(command, describe(app, *cmd, e));
}

int usage_error(const std::string& command, const std::string& what) {
  std::fprintf(stderr, "trainkit: error: %s\nRun '%s --help' for usage.\n", what.c_str(), command.c_str());
  return kExitUsage;
}

std::string unknown_command(const CLI::App& app, int argc, const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-') return {};
  const std::string word = argv[1];
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->check_name(word)) return {};
  return "unknown command '" + word + "' (choose from " + subcommand_names(app) + ")";
}

}  // namespace tk::cli
