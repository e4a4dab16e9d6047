// Whether a strategy's buckets' all-reduces overlap the backward pass (graph/bucket.h's AllReduceOptions::overlap):
// the option when given, else TK_ALLREDUCE_OVERLAP when set, else the group's default:
//   NCCL (replicas on GPUs): on. The reduction runs on a communication stream of its own beside the backward pass,
//     with nothing for the host to do (no polling), so starting each bucket as soon as its gradients are ready only
//     hides time; this is what PyTorch DDP does. Its costs are small: a first bucket of at most 1 MiB (one more
//     collective), two event records and a stream wait per bucket, and a device copy of a gradient reduced alone.
//   MPI on the cpu: off (a nonblocking all-reduce on shared memory progresses only inside MPI calls, measured slower:
//     docs/distributed.md). In-process cpu replicas: not built (their "communication" is their own reduction work).
#pragma once
#include <optional>
#include <string>

namespace tk::nn::distribute {

enum class OverlapGroup { nccl, mpi, in_process_cpu };

struct OverlapChoice {
  bool overlap = false;
  std::string note;  // for the strategy's description: "" or why a request was ignored
};

// `env`: TK_ALLREDUCE_OVERLAP's value (null or "" when unset), parsed by the settings registry (runtime/settings.h):
// InvalidArgument for a value other than 1/0/true/false/on/off.
OverlapChoice choose_overlap(std::optional<bool> option, const char* env, OverlapGroup group);

}  // namespace tk::nn::distribute
