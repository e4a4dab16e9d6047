// Op determinism (TensorFlow's tf.config.experimental.enable_op_determinism): with it on, running the same program
// on the same inputs on the same device gives the same bits every time.
//
//   tk::config::enable_op_determinism();   // or TK_DETERMINISTIC=1 in the environment
//
// What it changes (docs/determinism.md): on CUDA, cuDNN's convolutions take only algorithms cuDNN marks
// CUDNN_DETERMINISTIC (its fastest backward-filter algorithms add with atomics), and cuBLASLt's GEMMs are asked for
// algorithms without a split-K reduction. Everything else already is deterministic with it off: the CPU kernels, and
// trainkit's own CUDA kernels (fixed summation orders, no atomics). A program records nothing about it; the kernels
// read it when they choose an algorithm for a new shape, so turn it on before the first step.
#pragma once

namespace tk::config {

void enable_op_determinism();
void disable_op_determinism();  // tests; back to TK_DETERMINISTIC's value
// TK_DETERMINISTIC=1 (or true), or enable_op_determinism() called; read by the kernels for every new shape.
bool is_op_determinism_enabled();

}  // namespace tk::config
