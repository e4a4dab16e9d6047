// tk::config::enable_op_determinism and TK_DETERMINISTIC (include/trainkit/runtime/determinism.h).
#include "trainkit/runtime/determinism.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "trainkit/core/error.h"

namespace tk::config {
namespace {

bool from_environment() {
  static const bool on = [] {
    const char* v = std::getenv("TK_DETERMINISTIC");
    if (!v || !*v) return false;
    const std::string s(v);
    if (s == "1" || s == "true" || s == "TRUE" || s == "True") return true;
    if (s == "0" || s == "false" || s == "FALSE" || s == "False") return false;
    throw InvalidArgument("TK_DETERMINISTIC='" + s + "' is not a boolean (use 1 or 0)");
  }();
  return on;
}
std::atomic<bool>& called() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void enable_op_determinism() { called().store(true); }
void disable_op_determinism() { called().store(false); }
bool is_op_determinism_enabled() { return called().load() || from_environment(); }

}  // namespace tk::config
