// Runs a program in a child process (posix_spawn: safe in a process that already runs threads, unlike fork) and
// says how it ended: its exit status or the signal that killed it, and its last lines of output — so a crash,
// an out-of-memory or a kill in the child is a clear error in the parent, whose own memory is untouched.
//
//   tk::runtime::ChildResult r = tk::runtime::run_child({"trainkit", "fit", "-e", "1"}, {"TK_MEMORY_LIMIT=1GiB"});
//   if (!r.ok()) throw tk::Error(r.describe("trainkit fit"));
#pragma once
#include <string>
#include <vector>

namespace tk::runtime {

struct ChildResult {
  bool exited = false;  // exited normally (else killed by `signal`)
  int exit_code = -1;
  int signal = 0;
  std::vector<std::string> last_lines;  // its last lines of stdout and stderr, in the order they came
  bool ok() const { return exited && exit_code == 0; }
  // "`trainkit fit` crashed: SIGSEGV (segmentation fault)", "... ran out of memory: <its error line>",
  // "... was killed by SIGKILL (the kernel's OOM killer sends it ...)", "... exited with status 3".
  std::string describe(const std::string& command) const;
};

// argv[0] is looked up in PATH when it has no '/'. `extra_env` ("NAME=value") is added to (and overrides) this
// process's environment. forward: the child's output also goes to this process's stdout / stderr as it comes.
// `inherit_fds`: descriptors the child keeps (same numbers, close-on-exec cleared in the child only), e.g. a lease's
// flock'ed file, so the lock outlives this process while the child lives (docs/sharing.md).
// Throws IoError when the program cannot be started.
ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                      bool forward = true, size_t keep_lines = 20, const std::vector<int>& inherit_fds = {});

// This process's resident memory (VmRSS) in bytes.
size_t resident_bytes();

}  // namespace tk::runtime
