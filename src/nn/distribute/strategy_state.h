// What a MirroredStrategy shares with the models compiled in its scope: the devices, the replicas' group and
// their threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/distribute/local_collective.h"
#include "nn/distribute/replica_runner.h"
#include "trainkit/nn/distribute.h"

namespace tk::distribute {

struct StrategyState {
  std::vector<Device> devices;
  std::unique_ptr<nn::distribute::LocalCollective> collective;
  std::unique_ptr<nn::distribute::ReplicaRunner> runner;
  std::string description;
  int replicas() const { return static_cast<int>(devices.size()); }
};

}  // namespace tk::distribute
