// A pipeline over a device-resident source (Dataset::on_device(arrays, cuda:N)) as fit / evaluate / predict run it:
// the same stages over the source's row numbers, so that each batch is its rows (an int64 host tensor) and the
// arrays never leave the device. The batch is then gathered on the device straight into the program's inputs
// (nn::BatchStager, backends/cuda/device_gather.h).
//
//   on_device(x, y; cuda:0) -> shuffle(1000, 7) -> batch(64) -> prefetch(2)        (the user's pipeline)
//   range(0, N)             -> shuffle(1000, 7) -> batch(64) -> prefetch(2)        (indices: batches (64,) int64)
//
// The index pipeline's stages are copies of the user's (their seeds too) and a pass of it is numbered like a pass
// of the user's, so batch k holds the rows batch k of the user's pipeline holds (a test compares them). Only stages
// that move rows (Node::moves_rows: shuffle, batch, take, skip, shard, repeat, prefetch, with_options) can run on
// indices; a stage that needs the values (map, filter, cache, unbatch, zip, interleave) over a device-resident source
// is an InvalidArgument naming it and saying what to do.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "trainkit/data/dataset.h"

namespace tk::data {

struct DeviceBatches {
  std::vector<Tensor> arrays;  // the source's arrays: (N, ...) each, on `device`
  Device device;
  Dataset indices;  // the pipeline over row numbers: elements are (n,) int64 host tensors
};

// The index pipeline of `d` when its source is in the memory of a device the host cannot address; nullopt when the
// source is host memory (or the pipeline has no array source). `what` names the caller in errors ("fit").
std::optional<DeviceBatches> device_batches(const Dataset& d, const char* what);

// The rewrite itself, for any array source (host arrays too, so that it is tested without a GPU): nullopt when the
// pipeline is not array source -> row-moving stages. `blocker` then names the first stage that stops it.
std::optional<DeviceBatches> index_pipeline(const Dataset& d, std::string& blocker);

// How many rows of device-resident arrays this process has copied back to the host (iterating such a dataset by hand:
// sources.cpp). fit / evaluate / predict gather on the device and never add to it; the GPU tests check that.
uint64_t rows_copied_back();

}  // namespace tk::data
