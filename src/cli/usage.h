// Command-line mistakes, reported the way argparse-based tools (and TensorFlow's) do:
//
//   trainkit: error: --epochs: 'abc' is not an integer
//   Run 'trainkit fit --help' for usage.
//
// on stderr, exit status 2. --help and --version print to stdout and exit 0.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "trainkit/core/error.h"
#include "trainkit/nn/optimizers.h"

namespace tk::cli {

inline constexpr int kExitUsage = 2;      // the command line itself is wrong (argparse's status)
inline constexpr int kExitError = 1;      // a tk::Error while running: bad data, bad values, out of memory
inline constexpr int kExitInternal = 70;  // a bug (EX_SOFTWARE in sysexits.h)

// Catches what app.parse() throws: prints help/version (returning 0) or the error lines (returning 2).
int report_parse_error(const CLI::App& app, const CLI::ParseError& e);

// A usage error found before parsing: the first word names no subcommand. Empty when it does.
std::string unknown_command(const CLI::App& app, int argc, const char* const* argv);

// Prints "trainkit: error: <what>" and "Run '<command> --help' for usage." to stderr; returns kExitUsage.
int usage_error(const std::string& command, const std::string& what);

// An option check (CLI::Option::check) that accepts what `valid` accepts: `valid(value)` throws
// tk::InvalidArgument naming the valid choices (tk::optimizers::get does), so the list lives in one place.
template <typename Fn>
CLI::Validator choice_of(Fn valid) {
  return CLI::Validator(
      [valid](std::string& value) -> std::string {
        try {
          valid(value);
          return {};
        } catch (const InvalidArgument& e) {
          return e.what();
        }
      },
      "");
}

// "sgd, adam, ... or adafactor": tk::optimizers::names() for --optimizer's help.
inline std::string optimizer_names() {
  const std::vector<std::string> names = optimizers::names();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

}  // namespace tk::cli
