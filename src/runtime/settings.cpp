// Reading and parsing the registry's variables (runtime/settings.h); the table itself is settings_table.cpp.
// The only getenv of a TK_* variable in trainkit.
#include "runtime/settings.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "runtime/test_hooks.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk::runtime {
namespace {

std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

bool same(std::string_view a, std::string_view b, bool any_case) {
  return std::ranges::equal(a, b, [any_case](unsigned char x, unsigned char y) {
    return any_case ? std::toupper(x) == std::toupper(y) : x == y;
  });
}

// A boolean row's values: "ON WORDS / OFF WORDS".
struct BoolWords {
  std::vector<std::string_view> on, off;
};
BoolWords bool_words(const SettingInfo& s) {
  const std::string_view v = s.values;
  const size_t slash = v.find(" / ");
  if (s.type != SettingType::boolean || slash == std::string_view::npos)
    throw std::logic_error(std::string("settings: ") + s.name + " is not a boolean row");
  return {words(v.substr(0, slash)), words(v.substr(slash + 3))};
}
bool listed(const std::vector<std::string_view>& list, std::string_view value) {
  return std::ranges::find(list, value) != list.end();
}
bool any_other(const std::vector<std::string_view>& list) { return listed(list, "*"); }
std::optional<bool> match(const BoolWords& b, std::string_view value) {
  if (listed(b.on, value)) return true;
  if (listed(b.off, value)) return false;
  if (any_other(b.on)) return true;
  if (any_other(b.off)) return false;
  return std::nullopt;
}

// "a, b, c" (a "*" left out: callers say "any other value" themselves).
std::string join(const std::vector<std::string_view>& list) {
  std::string out;
  for (std::string_view w : list)
    if (w != "*") out += (out.empty() ? "" : ", ") + std::string(w);
  return out;
}

std::optional<double> parse_number(const SettingInfo& s, std::string_view value) {
  const std::string v(value);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(x > s.min_exclusive && x <= s.max_inclusive)) {
    if (s.strict) throw_bad_setting(s.id, value);
    return std::nullopt;
  }
  return x;
}

std::optional<size_t> parse_bytes(const SettingInfo& s, std::string_view value) {
  size_t bytes = 0;
  try {
    bytes = config::parse_bytes(std::string(value));
  } catch (const InvalidArgument& e) {
    if (s.strict) throw_bad_setting(s.id, value, e.what());
    return std::nullopt;
  }
  if (!(double(bytes) > s.min_exclusive && double(bytes) <= s.max_inclusive)) {
    if (s.strict) throw_bad_setting(s.id, value);
    return std::nullopt;
  }
  return bytes;
}

const SettingInfo& checked(Setting id, SettingType type) {
  const SettingInfo& s = setting_info(id);
  if (s.type != type) throw std::logic_error(std::string("settings: ") + s.name + " is a " + type_name(s.type));
  return s;
}

// The fallback of a row read with an `_or_default` accessor must be a value of its type.
[[noreturn]] void no_default(const SettingInfo& s) {
  throw std::logic_error(std::string("settings: ") + s.name + "'s default '" + s.fallback + "' is not a value");
}

// The variable's value read by `parse` (nullopt when unset): the setting_<type> accessors.
template <typename T>
std::optional<T> read_setting(Setting id, std::optional<T> (*parse)(Setting, std::string_view)) {
  const char* v = setting_raw(id);
  return v ? parse(id, v) : std::nullopt;
}

// `value` when set, else the row's fallback read by `parse(row, fallback)` (no_default when it is not a value).
template <typename T, typename Parse>
T or_default(Setting id, const std::optional<T>& value, Parse parse) {
  if (value) return *value;
  const SettingInfo& s = setting_info(id);
  try {
    if (const std::optional<T> d = parse(s, s.fallback)) return *d;
  } catch (const InvalidArgument&) {
  }
  no_default(s);
}

}  // namespace

const SettingInfo& setting_info(Setting id) {
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kSettingCount) throw std::logic_error("settings: no such setting");
  return all_settings()[static_cast<size_t>(i)];
}

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& s : all_settings())
    if (name == s.name) return &s;
  return nullptr;
}

const char* type_name(SettingType type) {
  // In SettingType's order.
  static constexpr const char* kNames[] = {"boolean", "integer", "bytes", "number", "text", "path", "choice"};
  static_assert(std::size(kNames) == static_cast<size_t>(SettingType::choice) + 1, "one name per SettingType");
  const auto i = static_cast<size_t>(type);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string allowed_text(const SettingInfo& s) {
  if (s.type == SettingType::boolean) {
    const BoolWords b = bool_words(s);
    if (!any_other(b.on) && !any_other(b.off)) return "one of " + join(b.on) + " (on), " + join(b.off) + " (off)";
    std::string out;  // a lenient reader's words, then what it makes of anything else
    for (const auto& [list, what] : {std::pair{&b.on, "on"}, std::pair{&b.off, "off"}})
      if (const std::string w = join(*list); !w.empty()) out += (out.empty() ? "" : "; ") + w + ": " + what;
    return out + "; any other value: " + (any_other(b.on) ? "on" : "off");
  }
  if (s.type == SettingType::choice) return "one of " + join(words(s.values)) + (s.any_case ? " (any case)" : "");
  return s.values;
}

[[noreturn]] void throw_bad_setting(Setting id, std::string_view value, const std::string& why) {
  const SettingInfo& s = setting_info(id);
  throw InvalidArgument(std::string(s.name) + "='" + std::string(value) + "' must be " + allowed_text(s) +
                        (why.empty() ? "" : " (" + why + ")") + "; unset it for the default (" + s.fallback + "). " +
                        s.name + ": " + s.meaning);
}

// ---- parsing

std::optional<bool> parse_setting_bool(Setting id, std::string_view value) {
  const SettingInfo& s = checked(id, SettingType::boolean);
  if (value.empty()) return std::nullopt;
  const std::optional<bool> on = match(bool_words(s), value);
  if (!on && s.strict) throw_bad_setting(id, value);
  return on;
}

std::optional<std::string> parse_setting_choice(Setting id, std::string_view value) {
  const SettingInfo& s = checked(id, SettingType::choice);
  if (value.empty()) return std::nullopt;
  for (std::string_view w : words(s.values))
    if (same(w, value, s.any_case)) return std::string(w);
  if (s.strict) throw_bad_setting(id, value);
  return std::nullopt;
}

std::optional<double> parse_setting_number(Setting id, std::string_view value) {
  const SettingInfo& s = checked(id, SettingType::number);
  if (value.empty()) return std::nullopt;
  return parse_number(s, value);
}

std::optional<size_t> parse_setting_bytes(Setting id, std::string_view value) {
  const SettingInfo& s = checked(id, SettingType::bytes);
  if (value.empty()) return std::nullopt;
  return parse_bytes(s, value);
}

// ---- reading

const char* setting_raw(Setting id) {
  const SettingInfo& s = setting_info(id);
  if (s.test_only) throw std::logic_error(std::string("settings: ") + s.name + " is a test hook (test_hooks.h)");
  return std::getenv(s.name);
}

// The one reader of the test-only rows (runtime/test_hooks.h); setting_raw refuses them.
const char* test_hook(Setting id) {
  const SettingInfo& s = setting_info(id);
  if (!s.test_only) throw std::logic_error(std::string("settings: ") + s.name + " is not a test hook");
  return std::getenv(s.name);
}

std::optional<std::string> setting_text(Setting id) {
  const char* v = setting_raw(id);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<bool> setting_bool(Setting id) { return read_setting(id, parse_setting_bool); }
std::optional<std::string> setting_choice(Setting id) { return read_setting(id, parse_setting_choice); }
std::optional<double> setting_number(Setting id) { return read_setting(id, parse_setting_number); }
std::optional<size_t> setting_bytes(Setting id) { return read_setting(id, parse_setting_bytes); }

bool setting_bool_or_default(Setting id) {
  return or_default(id, setting_bool(id),
                    [](const SettingInfo& s, std::string_view fallback) { return match(bool_words(s), fallback); });
}
double setting_number_or_default(Setting id) { return or_default(id, setting_number(id), parse_number); }
size_t setting_bytes_or_default(Setting id) { return or_default(id, setting_bytes(id), parse_bytes); }

SettingState inspect_setting(Setting id) {
  const SettingInfo& s = setting_info(id);
  const char* v = std::getenv(s.name);
  if (!v || !*v) return {v, ""};
  try {
    switch (s.type) {
      case SettingType::boolean:
        parse_setting_bool(id, v);
        break;
      case SettingType::choice:
        parse_setting_choice(id, v);
        break;
      case SettingType::number:
        parse_setting_number(id, v);
        break;
      case SettingType::bytes:
        parse_setting_bytes(id, v);
        break;
      case SettingType::integer:
      case SettingType::text:
      case SettingType::path:
        break;  // checked by their readers (TK_LEASE_WAIT), or taken as they are
    }
  } catch (const InvalidArgument& e) {
    return {v, e.what()};
  }
  return {v, ""};
}

}  // namespace tk::runtime
