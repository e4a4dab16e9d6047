// Which GPU each process of a MultiWorkerMirroredStrategy takes, and whether a list of CUDA devices can hold
// MirroredStrategy replicas: pure functions of what MPI, the environment and CUDA discovery report, so the CPU tests
// check every branch.
//
//   const RankDevice d = rank_device(world.local_rank(), visible, [](const char* v) { return std::getenv(v); }, why);
//   // rank 1 of a node with 2 GPUs: d.index == 1 (cuda:1), d.source == "MPI_COMM_TYPE_SHARED"
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "trainkit/core/device.h"

namespace tk::nn::distribute {

using EnvLookup = std::function<const char*(const char*)>;

struct RankDevice {
  int local_rank = 0;  // this process's number among the ranks on its node
  int index = 0;       // cuda:<index>: local_rank % visible
  std::string source;  // where local_rank came from: "MPI_COMM_TYPE_SHARED", or the launcher's variable
};

// The rank's GPU: its local rank modulo the `visible` CUDA devices (after CUDA_VISIBLE_DEVICES / TK_VISIBLE_DEVICES),
// as Horovod and PyTorch's launchers place ranks. mpi_local_rank: from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or
// -1 when MPI could not say; then the launcher's variables, in order: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI),
// MPI_LOCALRANKID (MPICH, Intel MPI), SLURM_LOCALID (srun). Unsupported when visible is 0 (with `no_device_reason`,
// CUDA discovery's); InvalidArgument when no local rank can be found, or a variable holds no rank number.
RankDevice rank_device(int mpi_local_rank, int visible, const EnvLookup& env, const std::string& no_device_reason);

// Why `devices` (all of kind cuda) cannot hold MirroredStrategy replicas in this process, or "" when they can:
// trainkit built without the CUDA backend, a device beyond the `visible` ones (naming it, and CUDA discovery's
// `reason` when there are none), or more than one device without NCCL to sum their gradients. Each says what to do.
std::string cuda_replicas_problem(const std::vector<Device>& devices, bool cuda_built, int visible,
                                  const std::string& reason, bool nccl_built);

}  // namespace tk::nn::distribute
