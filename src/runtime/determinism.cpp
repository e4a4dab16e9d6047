// tk::config::enable_op_determinism and TK_DETERMINISTIC (include/trainkit/runtime/determinism.h).
#include "trainkit/runtime/determinism.h"

#include <atomic>

#include "runtime/settings.h"

namespace tk::config {
namespace {

bool from_environment() {
  static const bool on = runtime::setting_bool_or_default(runtime::Setting::deterministic);
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
