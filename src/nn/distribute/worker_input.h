// fit's input under MultiWorkerMirroredStrategy: each rank reads its rows of every global batch of a Dataset
// (tf.data's AutoShardPolicy.DATA, data/auto_shard.h), or every batch when the policy is OFF or the pipeline cannot
// be cut (AUTO then says why, once, on rank 0).
#pragma once
#include <optional>

#include "data/auto_shard.h"
#include "nn/distribute/mpi_collective.h"

namespace tk::nn::distribute {

// The policy: the environment's TK_AUTO_SHARD (AUTO, DATA or OFF, any case) when set, else the dataset's
// (Options::auto_shard_policy). InvalidArgument naming the variable for any other value.
data::AutoShardPolicy auto_shard_policy(const data::Dataset& d);

// This rank's share of `d`, split as the step splits a global batch (batch_split.h); nullopt: every rank reads all.
// Under DATA a pipeline that cannot be cut is an InvalidArgument saying why and what to do.
std::optional<data::WorkerShare> worker_input(const data::Dataset& d, const MpiCollective& world);

}  // namespace tk::nn::distribute
