// Keras' mixed precision: a dtype policy per layer, float32 variables, 16-bit compute.
//
//   tk::mixed_precision::set_global_policy("mixed_bfloat16");   // layers made from now on compute in bfloat16
//   auto model = tk::models::tutorial_cnn();                     // the logits layer stays float32 (summary says why)
//   model->compile(tk::optimizers::Adam(), loss);                // mixed_float16: loss scaling is switched on
//   tk::layers::Dense(10, "softmax", {.dtype = "float32"});      // a layer's own policy (Keras' dtype=)
//
// Policies: "float32" (the default), "mixed_float16", "mixed_bfloat16". Under a mixed policy the weights (and
// the optimizer's slots) stay float32; each layer casts its weights and its inputs to the compute dtype when
// it runs, so activations and their gradients are stored in 16 bits (2 bytes each in the memory plan).
// As in Keras: BatchNormalization computes its statistics in float32, losses and metrics compute in float32,
// and model outputs are float32. Unlike Keras, a layer that produces a model output and has no policy of its
// own computes in float32 (Keras' guide asks users to set dtype="float32" there by hand).
#pragma once
#include <string>

#include "trainkit/core/dtype.h"

namespace tk::mixed_precision {

// InvalidArgument naming Keras' policies for an unknown name; Unsupported for "float16" / "bfloat16" (16-bit
// variables: use the mixed policies, whose variables stay float32).
void check_policy(const std::string& policy);
// The dtype a layer under `policy` computes in (float32, float16, bfloat16).
DType compute_dtype(const std::string& policy);
// Sets the policy layers and models made from now on take (Keras' keras.mixed_precision.set_global_policy).
void set_global_policy(const std::string& policy);
// The current global policy ("float32" until set).
std::string global_policy();

}  // namespace tk::mixed_precision
