// CPU kernels, one file per family. Each family registers its kernels (and the scratch they need) in
// its register_*_kernels(); register_kernels() calls them all, from CpuBackend::register_kernels().
#pragma once
#include <cstdint>

#include "trainkit/core/dtype.h"

namespace tk::graph {
struct ExecContext;
struct Graph;
struct Node;
}  // namespace tk::graph

namespace tk::cpu {

void register_linalg_kernels();       // linalg.cpp: MatMul, FusedMatMul (gemm.h), BiasAdd, BiasGrad
void register_elementwise_kernels();  // elementwise.cpp: Fill, Add, Mul, Scale, Reshape, DropoutMask, Random*
void register_cast_kernels();         // cast.cpp: Cast between every pair of dtypes
// cast.cpp: dst(n, to) = src(n, from) converted in parallel (core/convert.h): the Cast kernel, and the widened
// kernels' conversion (widen.cpp).
void convert_parallel(const void* src, DType from, void* dst, DType to, int64_t n, const graph::ExecContext&);
void register_activation_kernels();  // activations.cpp
void register_loss_kernels();        // losses.cpp: losses, their gradients, accuracy metrics
void register_optimizer_kernels();   // optimizers.cpp: SGD, Adam(W), RMSprop updates, AccumulateGrad
void register_conv_kernels();  // conv.cpp: Conv2D, FusedConv2D and the gradients (im2col + OpenBLAS) and their scratch
void register_pooling_kernels();          // pooling.cpp: max/avg pooling, Pad2D, Crop2D, Upsample2D, Resize
void register_image_transform_kernels();  // image_transform.cpp: AffineTransform (Keras' random image transforms)
void register_batchnorm_kernels();        // batchnorm.cpp
void register_collective_kernels();       // collectives.cpp: AllReduce (data parallel)
// The general tensor ops (graph/op.h from Unary on; their math in backends/math/):
void register_unary_kernels();         // unary.cpp: Unary, UnaryGrad
void register_broadcast_kernels();     // broadcast.cpp: Binary, Compare, Where, BroadcastTo
void register_reduce_kernels();        // reduce.cpp: Reduce, ArgReduce
void register_layout_kernels();        // layout.cpp: Transpose, Pad, Concat, Slice, Reverse (any axis, any dtype)
void register_gather_kernels();        // gather.cpp: Gather, GatherGrad, OneHot
void register_batch_matmul_kernels();  // batch_matmul.cpp: BatchMatMul (gemm.h per batch)
void register_assign_kernels();        // assign.cpp: StepValue, Assign (optimizers in the general ops)
void register_layer_norm_kernels();    // layer_norm.cpp: LayerNormStats, Apply, InputGrad, GammaGrad, Grad (fused)
void register_lstm_kernels();          // lstm.cpp: LstmSequence, LstmSequenceGrad (fused, graph/lstm_rules.h)
void register_attention_kernels();     // attention.cpp: Attention, AttentionGrad (fused, graph/attention_rules.h)
// Throws InvalidArgument: the node's function field (attrs.unary, .binary, .reduce) names no function.
[[noreturn]] void unknown_function(const graph::Node& node, const char* field);
// conv_onednn.cpp: replaces the im2col Conv2D kernels when oneDNN is built in and TK_CONV != im2col.
bool register_onednn_conv_kernels();
// conv_c1.cpp: direct Conv2D / FusedConv2D / Conv2DGradFilter for one input channel (stride 1) in float32, wrapping
// the kernels registered before it for every other convolution; then the same in bfloat16, registered last.
void register_c1_conv_kernels();
void register_c1_bf16_conv_kernels();
bool c1_conv_taken(const graph::Graph& g, int node);  // whether the direct kernel computes this node
// widen.cpp: float16 and bfloat16 kernels for every op with a float32 kernel and an output: inputs widened
// to float32 in the workspace, the float32 kernel, the output rounded back (to nearest even). Last: it
// wraps whatever float32 kernels and workspace rules are registered by then.
void register_widened_kernels();
// gemm_bf16.cpp: bfloat16 MatMul/FusedMatMul on oneDNN without float32 copies where the CPU has AVX512_BF16/AMX
// (else the widened kernels stay). After register_widened_kernels, whose kernels it falls back to.
void register_bf16_gemm_kernels();
// conv_onednn.cpp: bfloat16 convolutions on oneDNN without float32 copies, on the same CPUs (false elsewhere).
bool register_onednn_bf16_conv_kernels();
// exact16.cpp: max pooling, its (non-overlapping) gradient, the relu gradient and the bias gradient on 16-bit
// tensors as they are (no float32 copies in the workspace).
void register_exact16_kernels();
void register_kernels();  // all of the above

}  // namespace tk::cpu
