// The caller's side of the HDF5 helper process (see hdf5_isolation.h).
#include "data/hdf5_isolation.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>

#include "runtime/settings.h"
#include "trainkit/core/error.h"

extern char** environ;

namespace tk::data::hdf5_isolation {

namespace {

constexpr const char* kHelperName = "trainkit-hdf5-helper";
constexpr size_t kMaxOutput = size_t{1} << 31;

bool executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

std::string helper_path() {
  std::vector<std::string> tried;
  if (const char* env = runtime::setting_raw(runtime::Setting::hdf5_helper)) {
    if (executable(env)) return env;
    tried.emplace_back(env);
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    for (const std::string& p : {dir + "/" + kHelperName, dir + "/../" + kHelperName}) {
      if (executable(p)) return p;
      tried.push_back(p);
    }
  }
#ifdef TK_HDF5_HELPER_PATH
  if (executable(TK_HDF5_HELPER_PATH)) return TK_HDF5_HELPER_PATH;
  tried.emplace_back(TK_HDF5_HELPER_PATH);
#endif
#ifdef TK_HDF5_HELPER_INSTALLED
  if (executable(TK_HDF5_HELPER_INSTALLED)) return TK_HDF5_HELPER_INSTALLED;
  tried.emplace_back(TK_HDF5_HELPER_INSTALLED);
#endif
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
  throw IoError(std::string("cannot find ") + kHelperName + ", the process trainkit reads HDF5 files in (tried " +
                list + "; build the trainkit_hdf5_helper target, or set TK_HDF5_HELPER to its path)");
}

struct Result {
  int exit_code = -1;  // -1 when killed
  int signal = 0;
  std::string out;
};

Result run(const std::vector<std::string>& args) {
  const std::string exe = helper_path();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw IoError(std::string("cannot create a pipe for ") + kHelperName + ": " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // What libhdf5 or a sanitizer prints while dying is not the user's to read (TK_HDF5_HELPER_STDERR=1 shows it).
  if (!runtime::setting_bool_or_default(runtime::Setting::hdf5_helper_stderr))
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw IoError("cannot start " + exe + ": " + std::strerror(rc));
  }
  Result r;
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (r.out.size() + static_cast<size_t>(got) > kMaxOutput) {
      ::kill(pid, SIGKILL);
      break;
    }
    r.out.append(buf, static_cast<size_t>(got));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

[[noreturn]] void rethrow(const Result& r, const std::string& label) {
  if (r.signal != 0)
    throw FormatError(label + ": libhdf5 crashed (" + std::string(strsignal(r.signal)) +
                      ") reading this file in trainkit's helper process: the file is damaged (libhdf5 1.10 does not "
                      "survive some damaged old-format files); re-create or re-download it");
  if (r.exit_code == kHelperErrorExit && r.out.size() >= 2 && r.out[1] == '\n') {
    const std::string msg = r.out.substr(2);
    switch (r.out[0]) {
      case 'I':
        throw IoError(msg);
      case 'F':
        throw FormatError(msg);
      case 'U':
        throw Unsupported(msg);
      case 'A':
        throw InvalidArgument(msg);
      default:
        throw Error(msg);
    }
  }
  // Any other end: the helper died inside libhdf5 (a sanitizer's abort, an allocation failure, ...).
  throw FormatError(label + ": libhdf5 failed (" + kHelperName + " exit status " + std::to_string(r.exit_code) +
                    ") reading this file in trainkit's helper process: the file is damaged; re-create or re-download "
                    "it (TK_HDF5_HELPER_STDERR=1 shows what it printed)");
}

}  // namespace

bool& in_process() {
  static bool flag = false;
  return flag;
}

std::string encode_error(const std::exception& e) {
  char kind = 'X';
  if (dynamic_cast<const IoError*>(&e))
    kind = 'I';
  else if (dynamic_cast<const FormatError*>(&e))
    kind = 'F';
  else if (dynamic_cast<const Unsupported*>(&e))
    kind = 'U';
  else if (dynamic_cast<const InvalidArgument*>(&e))
    kind = 'A';
  return std::string(1, kind) + "\n" + e.what();
}

std::string fetch_tree(const std::string& file, const std::string& label, const std::string& data_file) {
  Result r = run({"tree", file, label, data_file});
  if (r.exit_code != 0 || r.signal != 0) rethrow(r, label);
  return std::move(r.out);
}

void preflight(const std::string& file) {
  if (in_process()) return;
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return;  // the reader reports the missing file itself
  using Key = std::tuple<std::string, off_t, int64_t, ino_t>;
  const Key key{file, st.st_size, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, st.st_ino};
  static std::mutex mu;
  static std::set<Key> checked;
  {
    std::lock_guard lock(mu);
    if (checked.count(key)) return;
  }
  Result r = run({"check", file});
  if (r.exit_code != 0 || r.signal != 0) rethrow(r, file);
  std::lock_guard lock(mu);
  checked.insert(key);
}

}  // namespace tk::data::hdf5_isolation
