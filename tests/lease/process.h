// Child processes for the lease and isolation tests: posix_spawn with stdout/stderr into files, then wait.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace tk::testing {

struct Child {
  pid_t pid = -1;
  std::string out, err;  // files
  int status = -1;       // waitpid status once finished
  bool finished = false;

  // Waits at most `seconds`; true when the child finished.
  bool wait_for(double seconds) {
    if (finished) return true;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) return finished = true;
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  bool exited_with(int code) const { return finished && WIFEXITED(status) && WEXITSTATUS(status) == code; }
  int exit_code() const { return finished && WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  void kill9() {
    if (!finished) ::kill(pid, SIGKILL);
    wait_for(30);
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string stdout_text() const { return read(out); }
  std::string stderr_text() const { return read(err); }
};

// Starts argv[0] with `extra_env` ("NAME=value") added to this process's environment.
inline Child spawn(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
                   const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  for (const std::string& e : extra_env) env_strings.push_back(e);
  std::vector<char*> args, env;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Child c;
  c.out = out;
  c.err = err;
  const int rc = posix_spawn(&c.pid, args[0], &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed");
  return c;
}

}  // namespace tk::testing
