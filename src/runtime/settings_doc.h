// The settings registry (runtime/settings.h) rendered for people: the Markdown table of docs/settings.md.
//
//   std::fputs(tk::runtime::settings_markdown().c_str(), stdout);  // `trainkit env --markdown`
#pragma once
#include <string>

namespace tk::runtime {

// One row per variable, in the registry's order: name, subsystem, type ("lenient" when an unknown value reads as
// the default), allowed values, default, meaning. No cell holds a '|'.
std::string settings_markdown();

}  // namespace tk::runtime
