// TensorFlow's filter for its C++ log lines, with its levels: TK_CPP_MIN_LOG_LEVEL (when unset, TF_CPP_MIN_LOG_LEVEL,
// so that a shell set up to quiet TensorFlow quiets trainkit too) — 0 (default) shows everything, 1 hides the INFO
// lines ("Created device ...", "Input pipeline: ...", the cuDNN and staging notes), 2 also hides the WARNING lines
// ("trainkit: warning: ...", "trainkit: W ..."); 3 is TensorFlow's "also ERROR" and reads as 2 here, because
// trainkit's error lines are the last word of a process that is ending (an MPI rank, an NCCL failure): hiding them
// would leave a non-zero exit without its reason. Progress bars, epoch lines and callbacks' messages are Keras'
// `verbose` output, not log lines: `verbose` governs them, as in Keras.
//
//   if (runtime::log_enabled(runtime::LogSeverity::info)) std::printf("Created device ...\n");
#pragma once

namespace tk::runtime {

enum class LogSeverity { info = 0, warning = 1 };

// Reads the environment on each call (log lines are rare): a test or a program may change it between runs.
bool log_enabled(LogSeverity severity);

}  // namespace tk::runtime
