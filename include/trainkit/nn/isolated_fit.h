// Training in a child process: when it ends, all of its memory goes back to the system (source row 18: people
// train in subprocesses for exactly this), and a crash, an out-of-memory or a kill there is an exception here,
// naming what happened and the child's last line — this process and its memory are untouched.
//
//   tk::History h = tk::isolated_fit(model, x, y, {.batch_size = 128, .epochs = 5, .memory_limit = "2GiB"});
//   // the model now holds the trained weights and optimizer state; h is the child's History
//
// The model goes to the child as a .keras file and the data as .npy files (in a temporary folder, removed
// afterwards); the child is `trainkit fit` (found as $TK_TRAINKIT, beside this executable, or on PATH), which
// sends back the trained .keras and its History. The model must be compiled; its loss takes sparse labels or
// targets shaped like its output, as the .keras file says. In the child the data goes through the input
// pipeline (shuffle buffer, batch, prefetch), so the result is not bit-identical to an in-process fit(x, y).
#pragma once
#include <optional>
#include <string>
#include <utility>

#include "trainkit/nn/model.h"

namespace tk {

struct IsolatedFitOptions {
  int64_t batch_size = 32;
  int epochs = 1;
  uint64_t seed = 42;        // the child's shuffling and dropout seed
  std::string memory_limit;  // the child's budget ("2GiB"; empty: the environment's TK_MEMORY_LIMIT, or all)
  std::string device = "cpu";
  int verbose = 0;  // the child's -v; not 0: its output is shown here as it comes
  std::optional<std::pair<Tensor, Tensor>> validation_data = std::nullopt;
};

// Trains `model` in a child process and copies the trained weights and optimizer state back. Throws
// OutOfMemoryError when the child ran out of memory, tk::Error for any other way it failed (crash, signal,
// bad input), with the child's last line; the model is then unchanged.
History isolated_fit(Model& model, const Tensor& x, const Tensor& y, IsolatedFitOptions options = {});

}  // namespace tk
