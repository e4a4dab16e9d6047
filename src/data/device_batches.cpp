// The index pipeline of a device-resident source (device_batches.h): the user's stages copied over range(0, N).
#include "data/device_batches.h"

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

// The stage of `node`'s pipeline, looking upstream, whose source holds arrays; null when there is none.
const Node* array_source(const Node& node) {
  if (node.source_arrays()) return &node;
  for (const auto& in : node.inputs)
    if (const Node* s = array_source(*in)) return s;
  return nullptr;
}

// `node` rebuilt over row numbers, or null (blocker: the stage that stops it).
std::shared_ptr<Node> rebuild(const std::shared_ptr<Node>& node, const std::vector<Tensor>*& arrays,
                              std::string& blocker) {
  if (const std::vector<Tensor>* a = node->source_arrays()) {
    arrays = a;
    return make_range_node(0, (*a)[0].dim(0), 1);
  }
  if (!node->moves_rows() || node->inputs.size() != 1) {
    blocker = node->label().empty() ? "a source" : node->label();
    return nullptr;
  }
  std::shared_ptr<Node> in = rebuild(node->inputs[0], arrays, blocker);
  if (!in) return nullptr;
  std::shared_ptr<Node> copy = node->with_input(std::move(in));
  if (!copy) blocker = node->label();
  return copy;
}

}  // namespace

std::optional<DeviceBatches> index_pipeline(const Dataset& d, std::string& blocker) {
  const std::vector<Tensor>* arrays = nullptr;
  std::shared_ptr<Node> indices = rebuild(d.node(), arrays, blocker);
  if (!indices || !arrays) return std::nullopt;
  return DeviceBatches{*arrays, (*arrays)[0].device(), Dataset(std::move(indices))};
}

std::optional<DeviceBatches> device_batches(const Dataset& d, const char* what) {
  const Node* source = array_source(*d.node());
  if (!source || (*source->source_arrays())[0].on_host()) return std::nullopt;
  const Device device = (*source->source_arrays())[0].device();
  std::string blocker;
  std::optional<DeviceBatches> b = index_pipeline(d, blocker);
  if (!b)
    throw InvalidArgument(std::string(what) + ": the dataset " + d.describe() + " reads arrays held on " +
                          device.to_string() + " (Dataset::on_device) through '" + blocker +
                          "', which needs the values on the host; over a device-resident source only shuffle, batch, "
                          "take, skip, shard, repeat and prefetch run (on row indices, the rows gathered on the "
                          "device). Build this pipeline from host arrays (Dataset::from_tensor_slices) instead");
  return b;
}

}  // namespace tk::data
