// The CLI's short model spec: "dense:256:relu,dropout:0.2,dense:10".
#pragma once
#include <string>
#include <vector>

#include "trainkit/nn/layers.h"

namespace tk::cli {

// Items: dense:UNITS[:ACTIVATION], dropout:RATE, activation:NAME, flatten. Throws InvalidArgument naming
// the item and its position.
std::vector<LayerPtr> parse_model_spec(const std::string& spec);

}  // namespace tk::cli
