// trainkit-hdf5-helper: the process libhdf5 meets files in first (src/data/hdf5_isolation.h).
//   trainkit-hdf5-helper tree FILE LABEL DATA   the tree (src/io/hdf5_tree.h) on stdout, each dataset read through
//                                               one staging buffer and appended to DATA: Keras weights
//   trainkit-hdf5-helper check FILE        the dataset reader's calls on FILE; exit 0 when none crashed
// A tk::Error is printed as the caller's protocol says (exit status 3); a crash kills only this process.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/hdf5_isolation.h"
#include "io/hdf5_tree.h"
#include "trainkit/core/error.h"
#include "trainkit/data/hdf5.h"

namespace {

// The answer goes to the original stdout; anything else the libraries print (device logs) goes to stderr.
int answer_fd = -1;

int write_all(const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(answer_fd, s.data() + done, s.size() - done);
    if (n <= 0) return 1;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// What the reader does with a file: open it, walk it, open and describe every dataset, check its storage
// and read its first and last row. An error is the reader's to report when it gets there (the same calls
// give the same error); only a crash matters here.
void check(const std::string& file) {
  tk::data::Hdf5File f(file);
  for (const tk::data::Hdf5DatasetInfo& d : f.list()) {
    if (!d.supported) continue;
    try {
      if (d.shape.rank() == 0) {
        f.load(d.path);
      } else if (d.shape[0] > 0) {
        f.read_rows(d.path, 0, 1);
        f.read_rows(d.path, d.shape[0] - 1, 1);
      }
    } catch (const tk::Error&) {
    }
  }
}

}  // namespace

namespace {
int run(int argc, char** argv);
}

// _exit: no atexit handlers. libhdf5 1.10.8 leaks inside itself on some damaged files; under LeakSanitizer
// that would turn every answer into exit status 23, which is not the protocol.
int main(int argc, char** argv) { ::_exit(run(argc, argv)); }

namespace {

int run(int argc, char** argv) {
  tk::data::hdf5_isolation::in_process() = true;
  // The helper never waits in the lease ledger (runtime/lease.h). Its parent waits for it, so a helper queued behind
  // another process's request that needs the parent's memory would leave all three waiting: seen under ctest -j2,
  // where `trainkit fit --replicas 2` held one replica's lease and waited for the next while a test loading a .keras
  // file held 69 MB and waited for its helper. The helper's memory is transient, bounded by the file it parses, and
  // still under its own budget (TK_MEMORY_LIMIT / TK_MEMORY_FRACTION are inherited).
  ::setenv("TK_LEASE", "off", 1);
  answer_fd = ::dup(STDOUT_FILENO);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "tree" && argc == 5)
      return write_all(tk::io::serialize_h5_tree(tk::io::read_h5_tree_file_in_process(argv[2], argv[3], argv[4])));
    if (mode == "check" && argc == 3) {
      try {
        check(argv[2]);
      } catch (const tk::Error&) {
      }
      return 0;
    }
    std::fprintf(stderr, "usage: trainkit-hdf5-helper tree FILE LABEL DATA | check FILE (run by trainkit)\n");
    return 2;
  } catch (const std::exception& e) {
    write_all(tk::data::hdf5_isolation::encode_error(e));
    return tk::data::hdf5_isolation::kHelperErrorExit;
  }
}

}  // namespace
