// HDF5 in a helper process. Debian 12's libhdf5 1.10.8 crashes inside itself on some damaged old-format
// files (fuzz/known_crashes/hdf5_old_format/). So libhdf5 first meets a file in `trainkit-hdf5-helper`,
// started with posix_spawn (a fresh process image: safe however many threads the caller has):
//   - Keras weights (.weights.h5, a .keras file's model.weights.h5, Keras 2 .h5) are read entirely in the
//     helper, which hands back the whole tree (fetch_tree): the caller's process never calls libhdf5 on them.
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

// Runs `trainkit-hdf5-helper tree <file>` and returns its output (an H5Tree, src/io/hdf5_tree.h).
std::string fetch_tree(const std::string& file, const std::string& label);
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
