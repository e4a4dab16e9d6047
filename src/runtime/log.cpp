#include "runtime/log.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/settings.h"

namespace tk::runtime {

bool log_enabled(LogSeverity severity) {
  int level = 0;
  if (const std::optional<std::string> word = setting_choice(Setting::cpp_min_log_level)) {
    level = (*word)[0] - '0';  // "0" ... "3"; anything else is an InvalidArgument naming the variable
  } else if (const char* tf = std::getenv("TF_CPP_MIN_LOG_LEVEL"); tf && tf[0] >= '0' && tf[0] <= '9') {
    level = tf[0] - '0';  // TensorFlow's own variable, read as TensorFlow reads it (its leading digit)
  }
  return static_cast<int>(severity) >= level;
}

}  // namespace tk::runtime
