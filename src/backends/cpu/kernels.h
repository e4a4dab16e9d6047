// CPU kernels, one file per family. Each registers itself in register_kernels().
#pragma once

namespace tk::cpu {

void register_linalg_kernels();       // linalg.cpp: MatMul (OpenBLAS), BiasAdd, BiasGrad
void register_elementwise_kernels();  // elementwise.cpp: Fill, Add, Mul, Reshape, Concat, Slice, DropoutMask
void register_activation_kernels();   // activations.cpp
void register_loss_kernels();         // losses.cpp: losses, their gradients, accuracy metrics
void register_optimizer_kernels();    // optimizers.cpp
void register_conv_kernels();         // conv.cpp: Conv2D and its gradients (im2col + OpenBLAS)
void register_pooling_kernels();      // pooling.cpp: max/avg pooling, Pad2D, Crop2D, Upsample2D
void register_batchnorm_kernels();
// conv_onednn.cpp: replaces the im2col Conv2D kernels when oneDNN is built in and TK_CONV != im2col.
bool register_onednn_conv_kernels();  // batchnorm.cpp
void register_kernels();              // all of the above

}  // namespace tk::cpu
