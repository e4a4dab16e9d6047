// Keras' regularization losses in a traced program (trainkit/nn/regularizers.h): weight penalties
// (kernel_regularizer=...) and activity penalties (activity_regularizer=...), float32 scalars that the tracer
// (nn/compiler/programs.cpp) adds to the compiled loss of training and evaluation programs.
#pragma once
#include <string>

#include "graph/graph.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

// (l1 * sum(|x|) + l2 * sum(x^2)) * scale as a float32 scalar (the tracer shapes it as the compiled loss); scale is 1
// for a weight and 1 / batch size for an activity (Keras 3 divides an activity penalty by the output's first
// dimension). -1 (no node) when l1 and l2 are both 0.
int emit_penalty(graph::Graph& g, const Regularizer& r, int x, float scale, const std::string& name);
// InvalidArgument naming the layer for a `regularizers` key that is none of Keras' options (a typo would otherwise
// regularize nothing).
void check_regularizer_keys(const Layer& layer);

}  // namespace tk::nn
