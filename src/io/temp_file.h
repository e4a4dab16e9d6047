// A private temporary file in the temporary directory (TMPDIR), removed when it goes: what loading hands the HDF5
// helper (a .keras file's model.weights.h5, extracted in pieces) and what the helper hands back (the datasets' data).
//
//   tk::io::TempFile tmp("tk-h5", "m.keras");   // IoError naming m.keras when it cannot be made
//   tmp.write_all(bytes, n);
//   int fd = tmp.release_fd();                   // the path is removed; the open descriptor stays the caller's
#pragma once
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "io/fd_write.h"
#include "trainkit/core/error.h"

namespace tk::io {

class TempFile {
 public:
  TempFile(const std::string& prefix, const std::string& label) : label_(label) {
    path_ = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    fd_ = ::mkostemp(path_.data(), O_CLOEXEC);
    if (fd_ < 0)
      throw IoError(label + ": cannot create a temporary file " + path_ + ": " + std::strerror(errno) +
                    " (check the temporary directory, TMPDIR)");
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  void write_all(const void* data, size_t n) {
    if (write_fully(fd_, data, n) < n)
      throw IoError(label_ + ": cannot write the temporary file " + path_ + ": " + std::strerror(errno) +
                    " (is the disk of the temporary directory, TMPDIR, full?)");
  }

  // Removes the path and gives the open descriptor to the caller (who closes it).
  int release_fd() {
    ::unlink(path_.c_str());
    path_.clear();
    return std::exchange(fd_, -1);
  }

 private:
  std::string label_, path_;
  int fd_ = -1;
};

}  // namespace tk::io
