// The reshape-aliasing pass (graph/alias.h).
#include "graph/alias.h"

#include "graph/schedule.h"

namespace tk::graph {
namespace {

// True when `id` is memory inside a Variable (outside the arena): a View has no offset to take there.
bool outside_arena(const Graph& g, int id) {
  while (is_alias(g, id)) id = g[id].inputs[0];
  return g[id].op == Op::Variable;
}

}  // namespace

int alias_reshapes(Graph& g) {
  int aliased = 0;
  for (int id = 0; id < g.size(); ++id) {
    Node& n = g[id];
    if (n.op != Op::Reshape || outside_arena(g, n.inputs[0])) continue;
    n.op = Op::View;  // attrs.shape is already the new shape; numel is unchanged (shape_reshape checked it)
    n.attrs.begin = 0;
    ++aliased;
  }
  return aliased;
}

}  // namespace tk::graph
