// Writing a whole buffer to a file descriptor (write(2) may write less than asked or be interrupted by a signal), and
// closing one at scope exit.
//
//   if (io::write_fully(fd, bytes, n) < n) throw IoError("cannot write " + path + ": " + std::strerror(errno));
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace tk::io {

// Writes the n bytes at data to fd, retrying after EINTR and short writes. Returns the bytes written: n, or fewer
// when a write failed (errno then says why; a write of 0 bytes leaves errno as the call left it).
inline size_t write_fully(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::write(fd, p + done, n - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) break;
    done += static_cast<size_t>(put);
  }
  return done;
}

// Closes fd at scope exit unless it is negative (set it to -1 once the descriptor is closed by hand).
struct CloseFd {
  int fd;
  ~CloseFd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace tk::io
