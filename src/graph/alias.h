// The reshape-aliasing pass: a Reshape whose input lives in the program's arena becomes a View of it (begin 0, the
// new shape), so the program copies nothing: a tensor is contiguous, and a reshape only renames its dimensions.
//
//   Reshape(x: (32, 80, 128)) -> (2560, 128)   becomes   View(x, begin 0, (2560, 128))   (no kernel, no buffer)
//
// The planner (graph/schedule.h) gives a View no storage of its own and keeps the value it looks into alive as long
// as any reader of the View; Program (graph/program.h) runs no kernel for it. A Reshape of a Variable (a weight,
// outside the arena) keeps its copy. It runs after the gradient graph is built (a View has no gradient rule), on the
// programs the fusion passes run on (TK_FUSE=0 turns it off with them; ONNX export traces without them).
//
//   int aliased = tk::graph::alias_reshapes(g);
#pragma once
#include "graph/graph.h"

namespace tk::graph {

// Rewrites every such Reshape in place; returns how many.
int alias_reshapes(Graph& g);

}  // namespace tk::graph
