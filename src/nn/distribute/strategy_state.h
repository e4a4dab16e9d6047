// What a MirroredStrategy shares with the models compiled in its scope: the devices, the replicas' group and
// their threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/distribute/local_collective.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replica_runner.h"
#include "trainkit/nn/distribute.h"

namespace tk::distribute {

struct StrategyState {
  std::vector<Device> devices;  // this process's replicas
  std::unique_ptr<nn::distribute::LocalCollective> collective;
  std::unique_ptr<nn::distribute::ReplicaRunner> runner;
  nn::distribute::MpiCollective* mpi = nullptr;  // MultiWorkerMirroredStrategy: one replica per process
  std::string description;
  int replicas() const { return static_cast<int>(devices.size()); }  // in this process
  int replicas_in_sync() const { return replicas() * (mpi ? mpi->size() : 1); }
  bool chief() const { return mpi == nullptr || mpi->rank() == 0; }
  // What training programs' AllReduce ops call: the processes' group, the replicas' in this process, or none.
  graph::Collective* program_collective() const {
    if (mpi) return mpi->size() > 1 ? mpi : nullptr;  // one rank: plain programs (train_step runs them)
    return replicas() > 1 ? collective.get() : nullptr;
  }
};

}  // namespace tk::distribute
