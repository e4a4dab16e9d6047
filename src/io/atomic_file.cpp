// AtomicFile: temporary in the destination's folder, fsync, rename(2), fsync of the folder (POSIX's recipe
// for a durable replace; rename within one file system is atomic).
#include "trainkit/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/fd_write.h"
#include "runtime/test_hooks.h"
#include "trainkit/core/error.h"

namespace tk::io {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kTempMarker = ".tk-tmp-";

std::string errno_text() { return std::strerror(errno); }

// TK_TEST_CRASH_AT names a point inside commit() where the process kills itself (tests only).
void maybe_crash(std::string_view point) {
  const char* at = runtime::test_hook(runtime::Setting::test_crash_at);
  if (at != nullptr && point == at) ::raise(SIGKILL);
}

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open " + path.string() + " to flush it to disk: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  // Some file systems refuse fsync on a directory (EINVAL); the rename is then as durable as they allow.
  if (rc != 0 && !(directory && (err == std::strerror(EINVAL)))) {
    throw IoError("cannot flush " + path.string() + " to disk: " + err + " (is the disk full or read-only?)");
  }
}

fs::path folder_of(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

}  // namespace

AtomicFile::AtomicFile(fs::path final_path) : final_(std::move(final_path)) {
  static std::atomic<unsigned> counter{0};
  if (final_.filename().empty()) throw InvalidArgument("cannot write '" + final_.string() + "': it names a folder");
  const fs::path folder = folder_of(final_);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw IoError("cannot write " + final_.string() + ": folder " + folder.string() +
                  " does not exist (create it first)");
  }
  temp_ = folder / (final_.filename().string() + std::string(kTempMarker) + std::to_string(::getpid()) + "-" +
                    std::to_string(counter++));
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);  // nothing to report from a destructor; the final file is untouched either way
  }
}

void AtomicFile::commit() {
  std::error_code ec;
  if (!fs::is_regular_file(temp_, ec)) {
    throw IoError("cannot commit " + final_.string() + ": the writer produced no file at " + temp_.string());
  }
  maybe_crash("before_fsync");
  fsync_path(temp_, false);
  maybe_crash("before_rename");
  if (::rename(temp_.c_str(), final_.c_str()) != 0) {
    throw IoError("cannot rename " + temp_.string() + " to " + final_.string() + ": " + errno_text());
  }
  committed_ = true;
  maybe_crash("after_rename");
  fsync_path(folder_of(final_), true);
}

void write_file_atomic(const fs::path& path, std::span<const std::byte> bytes) {
  AtomicFile file(path);
  const int fd = ::open(file.temp_path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create " + file.temp_path().string() + ": " + errno_text());
  const size_t done = write_fully(fd, bytes.data(), bytes.size());
  if (done < bytes.size()) {
    const std::string err = errno_text();
    ::close(fd);
    throw IoError("cannot write " + path.string() + " (" + std::to_string(done) + " of " +
                  std::to_string(bytes.size()) + " bytes written): " + err + " (is the disk full?)");
  }
  if (::close(fd) != 0) throw IoError("cannot write " + path.string() + ": " + errno_text());
  file.commit();
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  write_file_atomic(path, std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

bool is_atomic_temporary(const fs::path& path) {
  return path.filename().string().find(kTempMarker) != std::string::npos;
}

int remove_stale_temporaries(const fs::path& folder) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.find(kTempMarker);
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + kTempMarker.size(), nullptr, 10);
    // A live writer (kill(pid, 0) succeeds or is refused by permissions) keeps its temporary.
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    if (fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace tk::io
