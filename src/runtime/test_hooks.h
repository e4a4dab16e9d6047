// Test hooks: the environment variables that exist only so that the tests can make trainkit fail on purpose
// (TK_TEST_FAULT crashes a CLI child at start for the isolation tests; TK_TEST_CRASH_AT kills the process inside an
// atomic file write for the crash-safety tests). They are rows of the settings registry flagged test_only
// (runtime/settings_table.cpp), and this function is the one place production code reads them: setting_raw()
// refuses them, and test_hook() refuses any other row. Nothing a user sets should depend on them.
//
//   if (const char* at = runtime::test_hook(runtime::Setting::test_crash_at); at && point == at) ::raise(SIGKILL);
#pragma once
#include "runtime/settings.h"

namespace tk::runtime {

// getenv's answer for a test-only row (nullptr when unset); std::logic_error for any other row.
const char* test_hook(Setting id);

}  // namespace tk::runtime
