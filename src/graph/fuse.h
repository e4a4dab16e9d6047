// The epilogue fusion pass: GEMMs absorb the elementwise ops that follow them, so the values between
// disappear from the program (and from its memory plan) and the work is done while the product is in cache.
//
//   MatMul -> BiasAdd -> Relu   becomes  FusedMatMul(a, b, bias, epilogue Relu)      (forward, Dense + relu)
//   MatMul -> BiasAdd           becomes  FusedMatMul(a, b, bias)                     (forward, Dense)
//   MatMul -> ReluGrad(., y)    becomes  FusedMatMul(a, b, y, epilogue ReluGrad)     (backward: dx then relu')
//   Conv2D -> BiasAdd [-> Relu] becomes  FusedConv2D(x, w, bias [, epilogue Relu])   (forward, Conv2D layers)
//   MaxPool2DGrad -> ReluGrad   becomes  MaxPool2DGrad(dy, x, y, epilogue ReluGrad)  (backward: pooled relu)
//   MatMul(bf16) -> Cast(f32)   becomes  MatMul(a, b) with a float32 output           (a weight's gradient under
//                                                                                      mixed_bfloat16)
//   X -> BiasGrad               becomes  X writing the BiasGrad as a second output   (backward: the bias gradient
//                                        (attrs.side_output on both)                  summed while the activation
//                                                                                      gradient is written)
//     for X = FusedMatMul(ReluGrad epilogue) (Dense + relu), MaxPool2DGrad (conv + relu + max pooling) and ReluGrad
//     (conv + relu), float32. Unlike the chains above, X's output stays (the weight's and the input's gradients read
//     it too); what disappears is the BiasGrad's pass over it: for the tutorial CNN's first layer 12.8 MB read
//     again per step. The BiasGrad keeps its node and its storage; the planner makes that storage live from X's
//     step (graph/schedule.h), and Program hands it to X's kernel as KernelArgs::side_out.
//
// It runs on a traced graph (after the gradient graph is built) and rewrites nodes in place: the last node
// of a chain takes the fused op, the earlier ones lose their readers and are not scheduled. A chain fuses
// only when each intermediate value has exactly one reader and is not kept as a program output. The
// backends run FusedMatMul with their GEMM library's epilogues (oneDNN post-ops on the CPU; cuBLASLt's
// bias/relu epilogues on CUDA). TK_FUSE=0 turns the pass off (for A/B measurements).
//
//   int fused = tk::graph::fuse_epilogues(g, roots, keep);   // roots: what the program computes
#pragma once
#include <vector>

#include "graph/graph.h"

namespace tk::graph {

// The multi-tensor optimizer pass: the update ops of one layer's variables (its kernel and bias, whose gradients
// the backward pass makes one after the other) become one MultiUpdate, so one kernel updates them over a flat
// view. Grouping by layer keeps the early-update scheduling: a group runs as soon as its layer's gradients are
// ready and before the backward pass moves on to earlier layers, so the large gradients still die early (a
// bias's gradient waits for its kernel's: bytes, not megabytes). Returns the new sinks (each group replaces its
// members).
std::vector<int> group_updates(Graph& g, const std::vector<int>& sinks);

// Returns the number of chains fused. `roots` are the values and sinks the program runs for; `keep` the values
// read after it runs (they are never fused away).
int fuse_epilogues(Graph& g, const std::vector<int>& roots, const std::vector<int>& keep);
// False when TK_FUSE=0 is set.
bool fusion_enabled();

}  // namespace tk::graph
