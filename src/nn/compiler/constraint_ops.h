// Keras' weight constraints in a traced training program (trainkit/nn/constraints.h): a Constrain node on the
// variable, which the schedule runs after the variable's update (graph/schedule.cpp).
#pragma once
#include "graph/graph.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

// Adds Constrain(var) for `w`'s constraint and returns the node (a sink). InvalidArgument naming the weight for an
// axis outside its rank.
int emit_constraint(graph::Graph& g, const Constraint& c, int var, const Weight& w);
// InvalidArgument naming the layer for a `constraints` key that is none of Keras' options.
void check_constraint_keys(const Layer& layer);

}  // namespace tk::nn
