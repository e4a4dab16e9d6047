// The settings registry as a Markdown table (runtime/settings_doc.h): docs/settings.md holds this text,
// `trainkit env --markdown` prints it, and tests/test_settings.cpp fails when the two differ.
#include "runtime/settings_doc.h"

#include "runtime/settings.h"

namespace tk::runtime {
namespace {

// Whether a value outside the allowed ones reads as the default rather than stopping trainkit (text and paths
// are taken as they are, so the word says nothing there).
bool lenient(const SettingInfo& s) { return !s.strict && s.type != SettingType::text && s.type != SettingType::path; }

}  // namespace

std::string settings_markdown() {
  std::string out =
      "| variable | read in | type | values | default | meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const SettingInfo& s : all_settings())
    out += std::string("| `") + s.name + "` | " + s.subsystem + " | " + type_name(s.type) +
           (lenient(s) ? ", lenient" : "") + " | " + allowed_text(s) + " | " + s.fallback + " | " + s.meaning + " |\n";
  return out;
}

}  // namespace tk::runtime
