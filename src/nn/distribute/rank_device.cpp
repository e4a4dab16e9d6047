#include "nn/distribute/rank_device.h"

#include <cstdlib>

#include "trainkit/core/error.h"

namespace tk::nn::distribute {
namespace {

// A non-negative decimal number, else -1.
int parse_rank(const char* text) {
  if (!text || !*text) return -1;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 20) return -1;
  return static_cast<int>(v);
}

}  // namespace

RankDevice rank_device(int mpi_local_rank, int visible, const EnvLookup& env, const std::string& no_device_reason) {
  if (visible <= 0)
    throw Unsupported("MultiWorkerMirroredStrategy on cuda: this process sees no CUDA device (" +
                      (no_device_reason.empty() ? std::string("none found") : no_device_reason) +
                      "); run it where `trainkit devices` lists a GPU, or train on the cpu");
  RankDevice d;
  if (mpi_local_rank >= 0) {
    d.local_rank = mpi_local_rank;
    d.source = "MPI_COMM_TYPE_SHARED";
  } else {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
      const char* value = env(name);
      if (!value || !*value) continue;
      d.local_rank = parse_rank(value);
      if (d.local_rank < 0)
        throw InvalidArgument(std::string("MultiWorkerMirroredStrategy on cuda: ") + name + "='" + value +
                              "' is not a local rank number (the launcher sets it; unset it or fix it)");
      d.source = name;
      break;
    }
    if (d.source.empty())
      throw InvalidArgument(
          "MultiWorkerMirroredStrategy on cuda: this rank's local rank on its node is unknown (MPI could not split "
          "its node's ranks, and none of OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID is set): "
          "start it with mpirun, mpiexec or srun");
  }
  d.index = d.local_rank % visible;
  return d;
}

std::string cuda_replicas_problem(const std::vector<Device>& devices, bool cuda_built, int visible,
                                  const std::string& reason, bool nccl_built) {
  std::string names;
  for (size_t i = 0; i < devices.size(); ++i) names += (i ? ", " : "") + devices[i].to_string();
  const std::string head = "MirroredStrategy over " + names + ": ";
  if (!cuda_built)
    return head +
           "this build of trainkit has no CUDA backend (configure with -DTK_CUDA=ON where the CUDA toolkit is "
           "installed), or use cpu devices";
  for (const Device& d : devices)
    if (d.index >= visible)
      return head + d.to_string() + " does not exist: this process sees " +
             (visible == 0 ? "no CUDA device (" + reason + ")"
                           : std::to_string(visible) + " CUDA device" + (visible == 1 ? "" : "s") + " (cuda:0" +
                                 (visible > 1 ? " to cuda:" + std::to_string(visible - 1) : std::string()) + ")") +
             "; list only the devices `trainkit devices` shows (CUDA_VISIBLE_DEVICES and TK_VISIBLE_DEVICES select "
             "them)";
  if (devices.size() > 1 && !nccl_built)
    return head +
           "summing gradients between GPUs needs NCCL, and this build of trainkit has none (install NCCL, e.g. "
           "libnccl-dev or the CUDA toolkit's, and rebuild: CMake finds it); one GPU trains without it";
  return "";
}

}  // namespace tk::nn::distribute
