// The built-in layers (Keras 3 names and defaults).
//
//   using namespace tk::layers;
//   auto model = tk::Sequential({Input({28, 28}), Flatten(), Dense(128, "relu"), Dropout(0.2), Dense(10)});
//   Dense(64, "relu", {.use_bias = false, .kernel_initializer = "he_normal", .name = "hidden"});
#pragma once
#include <optional>

#include "trainkit/nn/layer.h"

namespace tk {

// Functional API entry point (keras.Input): a symbolic tensor of shape (None, ...shape).
KerasTensor Input(Shape shape, std::string name = {});

namespace layers {

// Sequential's first element (keras.Input / InputLayer).
LayerPtr Input(Shape shape, std::string name = {});

struct DenseOptions {
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};  // the layer's own dtype policy (Keras' dtype=); empty: the global one
};
// Densely connected: activation(x @ kernel + bias) over the last axis. kernel (in, units), bias (units,).
LayerPtr Dense(int64_t units, std::string activation = "linear", DenseOptions options = {});

// Keras 3's activation names: relu, sigmoid, tanh, softmax, gelu, elu, leaky_relu, relu6, selu, softplus, softsign,
// silu / swish, hard_sigmoid, hard_silu / hard_swish, exponential, mish, log_softmax, log_sigmoid, linear.
LayerPtr Activation(std::string activation, std::string name = {});
// Zeroes inputs with probability `rate` during training and scales the rest by 1/(1-rate).
LayerPtr Dropout(float rate, uint64_t seed = 0, std::string name = {});
LayerPtr Flatten(std::string name = {});
// Per-sample target shape (without the batch dimension).
LayerPtr Reshape(Shape target_shape, std::string name = {});
LayerPtr Add(std::string name = {});
// x * scale + offset, e.g. Rescaling(1.0f / 255) for uint8 images. Reading a model input, it is applied while
// each batch is staged, so the data can stay uint8 (or float16) in memory.
LayerPtr Rescaling(float scale, float offset = 0.0f, std::string name = {});
LayerPtr Concatenate(int axis = -1, std::string name = {});

// ---------------------------------------------------------------- images, channels_last (N, H, W, C)
// A (height, width) pair that a single int also converts to, as Keras' kernel_size=3.
struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit like Keras
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  int64_t h, w;
};

struct Conv2DOptions {
  Size2 strides = 1;
  std::string padding = "valid";  // or "same" (Keras puts the odd pixel at the bottom/right)
  Size2 dilation_rate = 1;
  int64_t groups = 1;  // Keras' groups: in_channels and filters both divisible; each group convolves its own channels
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};  // the layer's own dtype policy (Keras' dtype=); empty: the global one
};
// kernel (kh, kw, in_channels / groups, filters), bias (filters,).
LayerPtr Conv2D(int64_t filters, Size2 kernel_size, std::string activation = "linear", Conv2DOptions options = {});

struct DepthwiseConv2DOptions {
  Size2 strides = 1;
  std::string padding = "valid";  // or "same"
  int64_t depth_multiplier = 1;   // output channels = in_channels * depth_multiplier
  Size2 dilation_rate = 1;
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};
};
// Each input channel convolved with its own depth_multiplier filters (MobileNet's 3x3 blocks): kernel
// (kh, kw, in_channels, depth_multiplier) (Keras 3 names it "kernel"), bias (in_channels * depth_multiplier,);
// output channel c * depth_multiplier + m. One grouped convolution (groups = in_channels).
LayerPtr DepthwiseConv2D(Size2 kernel_size, std::string activation = "linear", DepthwiseConv2DOptions options = {});

struct SeparableConv2DOptions {
  Size2 strides = 1;
  std::string padding = "valid";  // or "same"
  int64_t depth_multiplier = 1;
  Size2 dilation_rate = 1;
  bool use_bias = true;
  std::string depthwise_initializer = "glorot_uniform";
  std::string pointwise_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};
};
// A depthwise convolution then a 1x1 one (Xception): depthwise_kernel (kh, kw, in_channels, depth_multiplier),
// pointwise_kernel (1, 1, in_channels * depth_multiplier, filters), bias (filters,).
LayerPtr SeparableConv2D(int64_t filters, Size2 kernel_size, std::string activation = "linear",
                         SeparableConv2DOptions options = {});

struct Conv2DTransposeOptions {
  Size2 strides = 1;
  std::string padding = "valid";                       // or "same"
  std::optional<Size2> output_padding = std::nullopt;  // Keras' None: chosen by padding; else each < its stride
  Size2 dilation_rate = 1;
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};
};
// The transpose (gradient) of a convolution, Keras 3's output shape (same: in * stride; valid: (in - 1) * stride +
// max(extent, stride); output_padding adds rows at the end): kernel (kh, kw, filters, in_channels), bias (filters,).
LayerPtr Conv2DTranspose(int64_t filters, Size2 kernel_size, std::string activation = "linear",
                         Conv2DTransposeOptions options = {});

struct PoolOptions {
  std::optional<Size2> strides = std::nullopt;  // default: pool_size
  std::string padding = "valid";
  std::string name = {};
};
LayerPtr MaxPooling2D(Size2 pool_size = 2, PoolOptions options = {});
LayerPtr AveragePooling2D(Size2 pool_size = 2, PoolOptions options = {});  // padding excluded from averages
LayerPtr GlobalAveragePooling2D(std::string name = {});                    // (N, H, W, C) -> (N, C)
LayerPtr GlobalMaxPooling2D(std::string name = {});

struct BatchNormalizationOptions {
  // The normalized (channel) axis, kept as given (Keras' axis=3 for NHWC images is the last axis spelled positively,
  // as keras.applications writes it) and resolved against the input's rank when the layer is built: trainkit
  // normalizes over the last axis only, so any other axis is an Unsupported error there. Never the batch axis.
  int axis = -1;
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  std::string name = {};
  // Data parallel (trainkit/nn/distribute.h): the batch statistics, and the input gradient's sums through them, are
  // those of the global batch, summed over the replicas (Keras' synchronized=True, PyTorch's SyncBatchNorm), so N
  // replicas train as one device on the whole batch; every replica's moving statistics are then the same. Costs
  // three small all-reduces per layer and step (C + 1, C and 2C + 1 floats). No effect without a strategy of two or
  // more replicas. Not with micro-batching under a strategy (an InvalidArgument says so).
  bool synchronized = false;
};
// Over the last axis (axis = -1 or rank - 1). Weights: gamma, beta (trainable), moving_mean, moving_variance (not
// trainable). Training uses batch statistics; evaluate/predict, and a frozen layer (trainable = false, as Keras 3), use
// the moving ones. Under a strategy each replica's statistics are its own rows' unless synchronized.
LayerPtr BatchNormalization(BatchNormalizationOptions options = {});
struct LayerNormalizationOptions {
  std::vector<int> axis = {-1};  // the normalized axes (negative from the end; never the batch axis)
  float epsilon = 1e-3f;
  bool center = true;        // beta
  bool scale = true;         // gamma
  bool rms_scaling = false;  // Keras 3's (deprecated): x * rsqrt(variance + epsilon) * gamma, no centering, no beta
  std::string gamma_initializer = "ones";
  std::string beta_initializer = "zeros";
  std::string name = {};
};
// Keras 3's LayerNormalization: per sample, over `axis`, y = (x - mean) / sqrt(variance + epsilon) * gamma + beta
// (biased variance), computed in float32 under any dtype policy. Weights: gamma, beta with the normalized axes'
// shape. A composite of the general tensor ops: its gradient is autodiff's (src/nn/layers/layer_normalization.cpp).
LayerPtr LayerNormalization(LayerNormalizationOptions options = {});
// Drops whole channels: one draw per (sample, channel).
LayerPtr SpatialDropout2D(float rate, uint64_t seed = 0, std::string name = {});
LayerPtr ZeroPadding2D(Size2 padding = 1, std::string name = {});  // symmetric
LayerPtr ZeroPadding2D(int64_t top, int64_t bottom, int64_t left, int64_t right, std::string name = {});
LayerPtr UpSampling2D(Size2 size = 2, std::string name = {});  // nearest

}  // namespace layers
}  // namespace tk
