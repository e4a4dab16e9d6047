// Padding elements of different shapes into one batch: padded_batch and bucket_by_sequence_length share it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trainkit/data/dataset.h"

namespace tk::data {

// How one pass pads: per component, the target shape (-1: the batch's longest) and the value (in the
// component's dtype). Resolved from the user's arguments against the first element seen.
struct PadSpec {
  PaddedShapes shapes;         // as given: empty, or one per component
  std::vector<double> values;  // as given: empty (0), one for all components, or one per component
};

// bucket_by_sequence_length's arguments, checked (Dataset::bucket_by_sequence_length).
struct BucketSpec {
  std::function<int64_t(const Element&)> length;
  std::vector<int64_t> boundaries;   // strictly increasing
  std::vector<int64_t> batch_sizes;  // boundaries.size() + 1, each > 0
  PadSpec pad;
  bool pad_to_bucket_boundary = false;
  bool no_padding = false;
  bool drop_remainder = false;
};

// Checks a PadSpec's own consistency (the parts that need no element); throws InvalidArgument naming `op`.
void check_pad_spec(const PadSpec& spec, const std::string& op);

// out = items[0..n) padded to a common shape per component and stacked: component shapes (n, padded...).
// `first_index[i]` is item i's position in the input (errors name it). `fill` replaces every -1 dimension
// of `spec.shapes` when >= 0 (bucket_by_sequence_length's pad_to_bucket_boundary). Errors name `op`, the
// element, the component and both shapes.
void pad_and_stack(const std::vector<Element>& items, size_t n, const std::vector<int64_t>& index, const PadSpec& spec,
                   int64_t fill, Element& out, const std::string& op);

}  // namespace tk::data
