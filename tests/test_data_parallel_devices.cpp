// Where data parallel replicas go on GPUs, checked on any machine: the GPU a MultiWorkerMirroredStrategy rank takes
// (its local rank modulo the GPUs it sees; the launcher's variables when MPI cannot say) and the errors for CUDA
// devices that cannot hold MirroredStrategy replicas (no CUDA backend, a GPU that is not there, no NCCL). The
// training runs on GPUs are in test_cuda_data_parallel.cpp (GPU machines only).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "nn/distribute/rank_device.h"
#include "runtime/cuda_device.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
using nn::distribute::cuda_replicas_problem;
using nn::distribute::rank_device;

// An environment of its own, so the test does not depend on (or change) the process's.
struct Env {
  std::map<std::string, std::string> vars;
  nn::distribute::EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RankDevice, FourLocalRanksOnTwoGpusShareThemInTurn) {
  const Env env;
  const int expected[] = {0, 1, 0, 1};
  for (int local = 0; local < 4; ++local) {
    const auto d = rank_device(local, 2, env.lookup(), "");
    EXPECT_EQ(d.index, expected[local]) << "local rank " << local;
    EXPECT_EQ(d.local_rank, local);
    EXPECT_EQ(d.source, "MPI_COMM_TYPE_SHARED");
  }
}

TEST(RankDevice, ThreeRanksOnEightGpusTakeTheFirstThree) {
  const Env env;
  for (int local = 0; local < 3; ++local) EXPECT_EQ(rank_device(local, 8, env.lookup(), "").index, local);
}

TEST(RankDevice, MpisLocalRankWinsOverTheLaunchersVariables) {
  const Env env{{{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"SLURM_LOCALID", "2"}}};
  const auto d = rank_device(1, 4, env.lookup(), "");
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.source, "MPI_COMM_TYPE_SHARED");
}

TEST(RankDevice, WithoutMpisAnswerTheLaunchersVariableSaysInOrder) {
  {
    const Env env{{{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"MPI_LOCALRANKID", "0"}, {"SLURM_LOCALID", "0"}}};
    const auto d = rank_device(-1, 2, env.lookup(), "");
    EXPECT_EQ(d.local_rank, 3);
    EXPECT_EQ(d.index, 1) << "local rank 3 on 2 GPUs: cuda:1";
    EXPECT_EQ(d.source, "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  {
    const Env env{{{"MPI_LOCALRANKID", "5"}, {"SLURM_LOCALID", "0"}}};  // MPICH / Intel MPI
    const auto d = rank_device(-1, 4, env.lookup(), "");
    EXPECT_EQ(d.index, 1);
    EXPECT_EQ(d.source, "MPI_LOCALRANKID");
  }
  {
    const Env env{{{"SLURM_LOCALID", "2"}}};  // srun
    const auto d = rank_device(-1, 8, env.lookup(), "");
    EXPECT_EQ(d.index, 2);
    EXPECT_EQ(d.source, "SLURM_LOCALID");
  }
}

TEST(RankDevice, NoGpuNoLocalRankOrABadVariableAreClearErrors) {
  const Env none;
  std::string e = error_of([&] { rank_device(0, 0, none.lookup(), "CUDA driver not found"); });
  EXPECT_NE(e.find("sees no CUDA device (CUDA driver not found)"), std::string::npos) << e;
  EXPECT_THROW(rank_device(0, 0, none.lookup(), ""), Unsupported);
  e = error_of([&] { rank_device(-1, 2, none.lookup(), ""); });
  EXPECT_NE(e.find("local rank on its node is unknown"), std::string::npos) << e;
  EXPECT_NE(e.find("SLURM_LOCALID"), std::string::npos) << e;
  const Env bad{{{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}}};
  e = error_of([&] { rank_device(-1, 2, bad.lookup(), ""); });
  EXPECT_NE(e.find("OMPI_COMM_WORLD_LOCAL_RANK='one' is not a local rank number"), std::string::npos) << e;
  EXPECT_THROW(rank_device(-1, 2, bad.lookup(), ""), InvalidArgument);
}

TEST(CudaReplicas, DevicesThatCanHoldReplicasAreAccepted) {
  EXPECT_EQ(cuda_replicas_problem({Device::cuda(0), Device::cuda(1)}, true, 2, "", true), "");
  EXPECT_EQ(cuda_replicas_problem({Device::cuda(0)}, true, 1, "", false), "") << "one GPU needs no NCCL";
  EXPECT_EQ(cuda_replicas_problem({Device::cuda(3), Device::cuda(1)}, true, 8, "", true), "");
}

TEST(CudaReplicas, EachProblemSaysWhatWhichDeviceAndWhatToDo) {
  std::string e = cuda_replicas_problem({Device::cuda(0), Device::cuda(1)}, false, 0, "", true);
  EXPECT_NE(e.find("MirroredStrategy over cuda:0, cuda:1: this build of trainkit has no CUDA backend"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("-DTK_CUDA=ON"), std::string::npos) << e;
  e = cuda_replicas_problem({Device::cuda(0), Device::cuda(1)}, true, 1, "", true);
  EXPECT_NE(e.find("cuda:1 does not exist: this process sees 1 CUDA device (cuda:0)"), std::string::npos) << e;
  EXPECT_NE(e.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e;
  e = cuda_replicas_problem({Device::cuda(0), Device::cuda(4)}, true, 3, "", true);
  EXPECT_NE(e.find("cuda:4 does not exist: this process sees 3 CUDA devices (cuda:0 to cuda:2)"), std::string::npos)
      << e;
  e = cuda_replicas_problem({Device::cuda(0)}, true, 0, "CUDA driver not found", true);
  EXPECT_NE(e.find("cuda:0 does not exist: this process sees no CUDA device (CUDA driver not found)"),
            std::string::npos)
      << e;
  e = cuda_replicas_problem({Device::cuda(0), Device::cuda(1)}, true, 2, "", false);
  EXPECT_NE(e.find("summing gradients between GPUs needs NCCL, and this build of trainkit has none"), std::string::npos)
      << e;
}

// The constructor reports what this machine lacks (here: no GPU, or no CUDA backend), before anything is made.
TEST(CudaReplicas, MirroredStrategyOverAbsentGpusIsOneClearError) {
  if (!runtime::cuda_devices().devices.empty()) GTEST_SKIP() << "this machine has a GPU (test_cuda_data_parallel.cpp)";
  for (const std::vector<Device>& devices :
       {std::vector<Device>{Device::cuda(0)}, std::vector<Device>{Device::cuda(0), Device::cuda(1)}}) {
    const std::string e = error_of([&] { distribute::MirroredStrategy s(devices); });
    ASSERT_FALSE(e.empty());
    if (runtime::cuda_built()) {
      EXPECT_NE(e.find("cuda:0 does not exist: this process sees no CUDA device (" + runtime::cuda_devices().reason),
                std::string::npos)
          << e;
    } else {
      EXPECT_NE(e.find("no CUDA backend"), std::string::npos) << e;
    }
    EXPECT_THROW(distribute::MirroredStrategy{devices}, Unsupported);
  }
  EXPECT_THROW(distribute::MirroredStrategy({Device::cpu(0), Device::cuda(0)}), InvalidArgument) << "one kind";
}

}  // namespace
}  // namespace tk
