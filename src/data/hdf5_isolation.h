// HDF5 in a helper process. Debian 12's libhdf5 1.10.8 crashes inside itself on some damaged old-format
// files (fuzz/known_crashes/hdf5_old_format/). So libhdf5 first meets a file in `trainkit-hdf5-helper`,
// started with posix_spawn (a fresh process image: safe however many threads the caller has):
//   - Keras weights (.weights.h5, a .keras file's model.weights.h5, Keras 2 .h5) are read entirely in the
//     helper (fetch_tree): it reads each dataset through one staging buffer into a data file the caller names and
//     answers with the tree's groups, attributes, shapes and offsets; the caller reads each dataset from that
//     plain file into its destination and never calls libhdf5 on the weights file. The helper inherits
//     TK_MEMORY_LIMIT and holds at most one staging buffer (io/file_staging.h) of it.
//   - The dataset reader (hdf5.cpp) streams rows from files of any size, so it cannot be handed back whole;
//     before the reader opens a file, the helper makes the calls the reading makes on it (open, walk every
//     link, open and describe every dataset, check its storage, read its first and last row: preflight).
//     libhdf5 is deterministic on the same bytes: when the helper survives them, the reader does too. A file
//     changed between the check and the read is not covered (the check is keyed by size, mtime and inode).
// A helper killed by a signal becomes one tk::FormatError naming the file; its own tk::Error comes back with
// its type and message.
//
// The helper is found at $TK_HDF5_HELPER, next to the running executable, or where this build put it.
#pragma once
#include <string>
#include <vector>

namespace tk::data::hdf5_isolation {

// Runs `trainkit-hdf5-helper tree <file> <label> <data_file>` and returns its answer (an H5Tree whose datasets are
// in `data_file`, src/io/hdf5_tree.h).
std::string fetch_tree(const std::string& file, const std::string& label, const std::string& data_file);
// Checks that the dataset reader's calls on `file` do not crash libhdf5 (see above); throws what the helper
// threw (or FormatError for a crash). Cached per (path, size, mtime, inode).
void preflight(const std::string& file);

// True inside the helper itself and in fuzz targets that exercise the in-process reader: no preflight.
bool& in_process();

// The helper's side of the protocol: what to print and which exit status to use for an error.
inline constexpr int kHelperErrorExit = 3;
// "I" IoError, "F" FormatError, "U" Unsupported, "A" InvalidArgument, "X" other; then '\n' and the message.
std::string encode_error(const std::exception& e);

}  // namespace tk::data::hdf5_isolation
