#include "graph/fuse.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "graph/schedule.h"
#include "runtime/settings.h"

namespace tk::graph {
namespace {

// "dense_1/matmul" -> "dense_1"
std::string layer_of(const std::string& name) { return name.substr(0, name.find('/')); }

// The bias-gradient part of fuse_epilogues (run after the chains): returns the BiasGrads fused.
int fuse_bias_gradients(Graph& g, const std::vector<char>& needed) {
  int fused = 0;
  auto all_f32 = [&](const Node& n) {
    return n.dtype == DType::f32 &&
           std::all_of(n.inputs.begin(), n.inputs.end(), [&](int in) { return g[in].dtype == DType::f32; });
  };
  for (int id = 0; id < g.size(); ++id) {
    Node& bg = g[id];
    if (!needed[static_cast<size_t>(id)] || bg.op != Op::BiasGrad || bg.attrs.side_output) continue;
    Node& p = g[bg.inputs[0]];
    const bool producer = (p.op == Op::FusedMatMul && p.attrs.epilogue == Op::ReluGrad) || p.op == Op::MaxPool2DGrad ||
                          p.op == Op::ReluGrad;
    if (!producer || p.attrs.side_output || !all_f32(p) || bg.dtype != DType::f32) continue;
    p.attrs.side_output = bg.attrs.side_output = true;
    p.name += "+bias_grad";
    ++fused;
  }
  return fused;
}

// TK_FUSE_BIAS_GRAD=0 turns it off alone (A/B measurements).
bool bias_grad_fusion_enabled() { return runtime::setting_bool_or_default(runtime::Setting::fuse_bias_grad); }

}  // namespace

bool fusion_enabled() { return runtime::setting_bool_or_default(runtime::Setting::fuse); }

int fuse_epilogues(Graph& g, const std::vector<int>& roots, const std::vector<int>& keep) {
  const size_t n = static_cast<size_t>(g.size());
  // Readers among the nodes the program runs; kept values count one more (they are read after the run).
  const std::vector<char> needed = needed_by(g, roots);
  std::vector<int> readers(n, 0), reader(n, -1);
  for (int id = 0; id < g.size(); ++id)
    if (needed[static_cast<size_t>(id)])
      for (int in : g[id].inputs) ++readers[static_cast<size_t>(in)], reader[static_cast<size_t>(in)] = id;
  for (int k : keep) readers[static_cast<size_t>(k)] += 1;
  auto only_reader = [&](int value) {
    return readers[static_cast<size_t>(value)] == 1 ? reader[static_cast<size_t>(value)] : -1;
  };
  auto same_dtype = [&](const Node& a, const Node& b) { return a.dtype == b.dtype; };

  // The last node of a chain takes the fused op; the values before it lose their only reader, so nothing
  // schedules them now.
  int fused = 0;
  auto rewrite = [&](int target, Op op, std::vector<int> inputs, const Attrs& at, std::string name) {
    Node& t = g[target];
    t.op = op;
    t.inputs = std::move(inputs);
    t.attrs = at;
    t.name = std::move(name);
    ++fused;
  };
  for (int id = 0; id < g.size(); ++id) {
    if (!needed[static_cast<size_t>(id)]) continue;
    Node& mm = g[id];
    const bool pool_grad = mm.op == Op::MaxPool2DGrad && !mm.attrs.split_ties;
    const bool conv = mm.op == Op::Conv2D;
    if (!pool_grad && mm.op != Op::MatMul && !conv) continue;
    const int next = only_reader(id);
    if (next < 0) continue;
    Node& r = g[next];
    if (pool_grad) {
      // The backward pass of relu -> max pooling: MaxPool2DGrad -> ReluGrad(., the pool's input) becomes one
      // MaxPool2DGrad that zeroes what lands on a non-positive input (one pass over the convolution's output
      // gradient instead of two).
      if (r.op != Op::ReluGrad || r.inputs[0] != id || r.inputs[1] != mm.inputs[1] || !same_dtype(mm, r)) continue;
      Attrs at = mm.attrs;
      at.epilogue = Op::ReluGrad;
      // "grad:<layer>/...": the plan attributes it to the layer.
      rewrite(next, Op::MaxPool2DGrad, mm.inputs, at, layer_of(mm.name) + "/max_pool_grad+relu_grad");
      continue;
    }
    Attrs at = mm.attrs;
    int target = -1;
    std::vector<int> inputs{mm.inputs[0], mm.inputs[1]};
    std::string what;
    const std::string base = conv ? "conv" : "matmul";
    if (r.op == Op::BiasAdd && r.inputs[0] == id && (conv || r.shape.rank() == 2) && same_dtype(mm, r)) {
      inputs.push_back(r.inputs[1]);
      at.epilogue = Op::kCount;
      target = next, what = base + "+bias";
      const int after = only_reader(next);
      if (after >= 0 && g[after].op == Op::Relu && same_dtype(r, g[after])) {
        at.epilogue = Op::Relu;
        target = after, what = base + "+bias+relu";
      }
    } else if (!conv && r.op == Op::ReluGrad && r.inputs[0] == id && r.inputs[1] != id && same_dtype(mm, r)) {
      inputs.push_back(r.inputs[1]);
      at.epilogue = Op::ReluGrad;
      target = next, what = "matmul+relu_grad";
    } else if (!conv && r.op == Op::Cast && mm.dtype == DType::bf16 && r.dtype == DType::f32 &&
               g[mm.inputs[0]].dtype == DType::bf16 && g[mm.inputs[1]].dtype == DType::bf16) {
      // A weight's gradient under mixed_bfloat16: the product is written in float32 at once, not rounded to
      // bfloat16 and widened back. bfloat16 only: float16's range is part of loss scaling (a float16 gradient that
      // overflows must show as inf), and bfloat16 has float32's range.
      rewrite(next, Op::MatMul, std::move(inputs), at, mm.name + "+cast");
      continue;
    }
    if (target < 0) continue;
    const std::string& last = g[target].name;
    rewrite(target, conv ? Op::FusedConv2D : Op::FusedMatMul, std::move(inputs), at,
            (layer_of(mm.name) == layer_of(last) ? layer_of(last) : last) + "/" + what);
  }
  if (bias_grad_fusion_enabled()) fused += fuse_bias_gradients(g, needed);
  return fused;
}

std::vector<int> group_updates(Graph& g, const std::vector<int>& sinks) {
  auto single = [](Op op) { return op == Op::SgdUpdate || op == Op::AdamUpdate || op == Op::RmspropUpdate; };
  // Groups: one per layer (the variables' owner, from their names) and update signature (rule, optimizer config,
  // gate, zero_grad), in the order of their first member.
  std::vector<std::vector<int>> groups;
  auto same = [&](int a_id, int b_id) {
    const Node& a = g[a_id];
    const Node& b = g[b_id];
    return a.op == b.op && a.attrs.update == b.attrs.update && a.attrs.gated == b.attrs.gated &&
           a.attrs.zero_grad == b.attrs.zero_grad && a.dtype == b.dtype &&
           (!a.attrs.gated || a.inputs.back() == b.inputs.back()) &&
           layer_of(g[a.inputs[0]].name) == layer_of(g[b.inputs[0]].name);
  };
  for (int id : sinks) {
    if (!single(g[id].op) || g[id].dtype != DType::f32) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const std::vector<int>& grp) { return grp.size() < 64 && same(grp.front(), id); });
    if (it == groups.end())
      groups.push_back({id});
    else
      it->push_back(id);
  }
  std::vector<int> out = sinks;
  for (const std::vector<int>& run : groups) {
    if (run.size() < 2) continue;
    const Node first = g[run.front()];
    const size_t slots = first.inputs.size() - 2 - (first.attrs.gated ? 1 : 0);
    std::vector<int> inputs;
    for (int u : run) inputs.push_back(g[u].inputs[0]);
    for (int u : run) inputs.push_back(g[u].inputs[1]);
    for (int u : run)
      for (size_t j = 0; j < slots; ++j) inputs.push_back(g[u].inputs[2 + j]);
    if (first.attrs.gated) inputs.push_back(first.inputs.back());
    Attrs at = first.attrs;
    at.size = static_cast<int64_t>(run.size());
    at.epilogue = first.op;
    const int group = g.add(Op::MultiUpdate, std::move(inputs), at, layer_of(g[first.inputs[0]].name) + "/update");
    std::replace(out.begin(), out.end(), run.front(), group);
    std::erase_if(out, [&](int s) { return std::find(run.begin() + 1, run.end(), s) != run.end(); });
  }
  return out;
}

}  // namespace tk::graph
