// Child processes with their exit reason and last lines (runtime/isolate.h).
#include "runtime/isolate.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>

#include "trainkit/core/error.h"

extern char** environ;

namespace tk::runtime {
namespace {

std::string signal_text(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (segmentation fault)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGABRT:
      return "SIGABRT (aborted)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGKILL:
      return "SIGKILL (sent by `kill -9`, or by the kernel's OOM killer when the machine ran out of memory: see "
             "`dmesg`)";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal " + std::to_string(sig) + " (" + std::string(strsignal(sig)) + ")";
  }
}

bool crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGFPE || sig == SIGILL;
}

}  // namespace

std::string ChildResult::describe(const std::string& command) const {
  std::string s = "`" + command + "`";
  if (exited && exit_code == 0) return s + " succeeded";
  std::string oom_line;
  for (const std::string& l : last_lines)
    if (l.find("trainkit: error: OOM") != std::string::npos || l.find("out of memory") != std::string::npos ||
        l.find("OutOfMemoryError") != std::string::npos)
      oom_line = l;
  if (!exited)
    s += crash_signal(signal) ? " crashed: " + signal_text(signal) : " was killed by " + signal_text(signal);
  else if (!oom_line.empty())
    s += " ran out of memory (exit status " + std::to_string(exit_code) + ")";
  else
    s += " failed with exit status " + std::to_string(exit_code);
  if (last_lines.empty()) return s + "; it printed nothing";
  s += "; its last lines:";
  for (const std::string& l : last_lines) s += "\n  | " + l;
  return s;
}

size_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env, bool forward,
                      size_t keep_lines, const std::vector<int>& inherit_fds) {
  if (argv.empty()) throw InvalidArgument("run_child: no program given");
  // The environment: ours, with extra_env's names replaced.
  std::map<std::string, std::string> env;
  std::vector<std::string> order;
  auto put = [&](const std::string& kv) {
    const std::string name = kv.substr(0, kv.find('='));
    if (!env.count(name)) order.push_back(name);
    env[name] = kv;
  };
  for (char** e = environ; *e; ++e) put(*e);
  for (const std::string& kv : extra_env) put(kv);
  std::vector<std::string> env_strings;
  for (const std::string& n : order) env_strings.push_back(env[n]);
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw IoError(std::string("run_child: pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    throw IoError(std::string("run_child: pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  // dup2(fd, fd) in the child clears its close-on-exec flag there (POSIX 2024; glibc >= 2.29): this process's
  // descriptor keeps the flag, so no other program it starts inherits the descriptor.
  for (int fd : inherit_fds) posix_spawn_file_actions_adddup2(&fa, fd, fd);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]), ::close(err[0]);
    throw IoError("cannot start `" + argv[0] + "`: " + std::strerror(rc) +
                  " (check the program's name and that it is on PATH)");
  }
  // Forward and keep the last lines, per stream, until both pipes close.
  ChildResult r;
  std::deque<std::string> last;
  std::string partial[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_streams = 2;
  char buf[65536];
  auto keep = [&](int s, const char* p, size_t n) {
    partial[s].append(p, n);
    size_t nl;
    while ((nl = partial[s].find('\n')) != std::string::npos) {
      last.push_back(partial[s].substr(0, nl));
      partial[s].erase(0, nl + 1);
      if (last.size() > keep_lines) last.pop_front();
    }
  };
  while (open_streams > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int s = 0; s < 2; ++s) {
      if (fds[s].fd < 0 || !(fds[s].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[s].fd, buf, sizeof buf);
      if (n > 0) {
        if (forward) {
          [[maybe_unused]] const ssize_t w = ::write(s == 0 ? 1 : 2, buf, static_cast<size_t>(n));
        }
        keep(s, buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[s].fd);
        fds[s].fd = -1;
        --open_streams;
      }
    }
  }
  for (int s = 0; s < 2; ++s)
    if (!partial[s].empty()) last.push_back(partial[s]);
  while (last.size() > keep_lines) last.pop_front();
  r.last_lines.assign(last.begin(), last.end());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return r;
}

}  // namespace tk::runtime
