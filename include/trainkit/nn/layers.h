// The built-in layers (Keras 3 names and defaults).
//
//   using namespace tk::layers;
//   auto model = tk::Sequential({Input({28, 28}), Flatten(), Dense(128, "relu"), Dropout(0.2), Dense(10)});
//   Dense(64, "relu", {.use_bias = false, .kernel_initializer = "he_normal", .name = "hidden"});
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "trainkit/nn/layer.h"

namespace tk {

// Functional API entry point (keras.Input): a symbolic tensor of shape (None, ...shape). dtype: float32, or int32 /
// int64 for token ids (an Embedding's input); x arrays of any dtype are converted to it batch by batch.
KerasTensor Input(Shape shape, std::string name = {}, DType dtype = DType::f32);

namespace layers {

// Sequential's first element (keras.Input / InputLayer).
LayerPtr Input(Shape shape, std::string name = {}, DType dtype = DType::f32);

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
// Keras' noise_shape: the mask's shape, one entry per input axis (batch first); -1 (None) takes the input's
// dimension, 1 shares one draw along that axis. EfficientNet's stochastic depth is Dropout(rate, {-1, 1, 1, 1}):
// one draw per sample, broadcast over H, W and C.
LayerPtr Dropout(float rate, std::vector<int64_t> noise_shape, uint64_t seed = 0, std::string name = {});
LayerPtr Flatten(std::string name = {});
// Per-sample target shape (without the batch dimension).
LayerPtr Reshape(Shape target_shape, std::string name = {});
LayerPtr Add(std::string name = {});  // Keras' broadcasting, as Multiply below
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
// Keras' UpSampling2D: rows and columns repeated (interpolation "nearest") or a bilinear resize to size times the
// input ("bilinear": keras.ops.image.resize, half-pixel centers).
LayerPtr UpSampling2D(Size2 size = 2, std::string name = {}, std::string interpolation = "nearest");

// ---------------------------------------------------------------- sequences, channels_last (N, steps, channels)
struct EmbeddingOptions {
  std::string embeddings_initializer = "uniform";  // Keras' default: RandomUniform(-0.05, 0.05)
  bool mask_zero = false;                          // true: id 0 is padding, masked in the layers after it (Keras)
  std::string name = {};
};
// Token ids (N, ...) -> (N, ..., output_dim), rows of the weight embeddings (input_dim, output_dim). Ids come from an
// int32 / int64 Input (Input(shape, name, DType::i32)); float ids are cast to int32. An id outside [0, input_dim) is
// an InvalidArgument naming the layer, the id, its row in the batch and input_dim.
LayerPtr Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {});
// Keras' Masking: the steps (N, steps, features) whose features all equal mask_value are masked — their features set
// to 0, and the output carries the (N, steps) mask that RNNs, GlobalAveragePooling1D, MultiHeadAttention and the loss
// consume, as Embedding(mask_zero) does.
LayerPtr Masking(float mask_value = 0.0f, std::string name = {});

struct Conv1DOptions {
  int64_t strides = 1;
  std::string padding = "valid";  // "same" (the odd step at the end, as Keras) or "causal" (all padding before)
  int64_t dilation_rate = 1;
  int64_t groups = 1;  // filters and input channels split into `groups` independent convolutions
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::string name = {};
  std::string dtype = {};  // the layer's own dtype policy (Keras' dtype=); empty: the global one
};
// (N, steps, in) -> (N, new_steps, filters). kernel (kernel_size, in / groups, filters), bias (filters,).
LayerPtr Conv1D(int64_t filters, int64_t kernel_size, std::string activation = "linear", Conv1DOptions options = {});

struct Pool1DOptions {
  std::optional<int64_t> strides = std::nullopt;  // default: pool_size
  std::string padding = "valid";                  // or "same" (padding excluded from averages)
  std::string name = {};
};
LayerPtr MaxPooling1D(int64_t pool_size = 2, Pool1DOptions options = {});
LayerPtr AveragePooling1D(int64_t pool_size = 2, Pool1DOptions options = {});
// (N, steps, C) -> (N, C), or (N, 1, C) with keepdims.
LayerPtr GlobalAveragePooling1D(bool keepdims = false, std::string name = {});
LayerPtr GlobalMaxPooling1D(bool keepdims = false, std::string name = {});
LayerPtr ZeroPadding1D(int64_t before = 1, int64_t after = 1, std::string name = {});  // zeros around the steps
LayerPtr Cropping1D(int64_t begin = 1, int64_t end = 1, std::string name = {});        // steps removed at each end
LayerPtr UpSampling1D(int64_t size = 2, std::string name = {});                        // each step repeated
// Drops whole channels: one draw per (sample, channel) of (N, steps, C).
LayerPtr SpatialDropout1D(float rate, uint64_t seed = 0, std::string name = {});

// ---------------------------------------------------------------- recurrent layers, (N, steps, features)
// Keras 3's SimpleRNN, LSTM and GRU: weights kernel (features, G*units), recurrent_kernel (units, G*units), bias
// (G*units) — GRU with reset_after: (2, 3*units), input and recurrent biases — gates in Keras' order (LSTM i, f, c, o;
// GRU z, r, h). The time axis is unrolled (its length must be known). Output (N, units), or (N, steps, units) with
// return_sequences (in the order processed: reversed with go_backwards, as Keras). dropout: one mask per sequence on
// the inputs (Keras' implementation 2). Refused (Unsupported): stateful, recurrent_dropout in training.
// return_state: the layer returns [output, h] ([output, h, c] for an LSTM) from call_all; initial states follow the
// sequence among the inputs: LSTM(8)({x, h, c}) (Keras' initial_state=[h, c]).
//
//   auto h = Bidirectional(LSTM(64, {.return_sequences = true}))(Embedding(10000, 128)(tokens));   // (N, T, 128)
struct SimpleRNNOptions {
  std::string activation = "tanh";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "orthogonal";
  std::string bias_initializer = "zeros";
  float dropout = 0.0f, recurrent_dropout = 0.0f;
  uint64_t seed = 0;  // dropout masks; 0: from the global seed stream
  bool return_sequences = false, return_state = false, go_backwards = false, stateful = false, unroll = false;
  std::string name = {};
  std::string dtype = {};
};
struct LSTMOptions {
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "orthogonal";
  std::string bias_initializer = "zeros";
  bool unit_forget_bias = true;  // the forget gate's bias starts at 1
  float dropout = 0.0f, recurrent_dropout = 0.0f;
  uint64_t seed = 0;
  bool return_sequences = false, return_state = false, go_backwards = false, stateful = false, unroll = false;
  std::string name = {};
  std::string dtype = {};
};
struct GRUOptions {
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string recurrent_initializer = "orthogonal";
  std::string bias_initializer = "zeros";
  bool reset_after = true;  // Keras 3's default: the reset gate multiplies h @ U_h + b_h (cuDNN's form)
  float dropout = 0.0f, recurrent_dropout = 0.0f;
  uint64_t seed = 0;
  bool return_sequences = false, return_state = false, go_backwards = false, stateful = false, unroll = false;
  std::string name = {};
  std::string dtype = {};
};
LayerPtr SimpleRNN(int64_t units, SimpleRNNOptions options = {});
LayerPtr LSTM(int64_t units, LSTMOptions options = {});
LayerPtr GRU(int64_t units, GRUOptions options = {});
struct BidirectionalOptions {
  std::string merge_mode = "concat";  // "sum", "ave", "mul" (Keras' None, two outputs, is not supported)
  LayerPtr backward_layer = {};       // default: a copy of `layer` with go_backwards flipped
  std::string name = {};
};
// Runs `layer` (a SimpleRNN, LSTM or GRU, unbuilt) forward and a copy of it backward (names forward_<name>,
// backward_<name>, as Keras) and merges their outputs (the backward sequence flipped back to time order).
LayerPtr Bidirectional(LayerPtr layer, BidirectionalOptions options = {});
// Keras' TimeDistributed: `layer` (unbuilt or built; its weights shared) applied to every step of (N, T, ...) inputs,
// e.g. TimeDistributed(Dense(8))(x) on (N, T, d) -> (N, T, 8), TimeDistributed(Conv2D(...)) on video frames. The
// steps are folded into the batch, so layers that mix the rows of a batch (BatchNormalization) or read the step mask
// (recurrent layers, attention, 1-D global pooling) are refused (InvalidArgument). The Keras mask passes through.
LayerPtr TimeDistributed(LayerPtr layer, std::string name = {});

// ---------------------------------------------------------------- attention (N, steps, features)
struct MultiHeadAttentionOptions {
  int64_t value_dim = 0;  // 0: key_dim (Keras' None)
  float dropout = 0.0f;   // on the attention probabilities, in training only
  bool use_bias = true;
  std::vector<int64_t> output_shape = {};  // empty: the query's features (Keras' None)
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  uint64_t seed = 0;  // dropout's; 0: from the global seed stream
  std::string name = {};
};
// Keras 3's MultiHeadAttention over the steps of (N, T, d) inputs, called on {query, value} or {query, value, key}
// (key defaults to value); causal self-attention: layer({x, x}, LayerConfig{}.set("use_causal_mask", true)).
// Weights in Keras' layout (query/kernel (d, H, key_dim), ..., attention_output/kernel (H, value_dim, out)).
// attention_mask and return_attention_scores are not built.
LayerPtr MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options = {});
struct AttentionOptions {
  bool use_scale = false;          // a learned scalar scale on the scores (ones)
  std::string score_mode = "dot";  // "dot" (q . k) or "concat" (sum tanh(q + k), times concat_score_weight)
  float dropout = 0.0f;            // on the attention probabilities, in training only
  uint64_t seed = 0;               // dropout's; 0: from the global seed stream (Keras' None)
  std::string name = {};
};
// Keras 3's Attention (Luong) called on {query (N, Tq, d), value (N, Tv, dv)} or {query, value, key (N, Tv, d)}:
// softmax(scores) . value (N, Tq, dv); causal: layer({q, v}, LayerConfig{}.set("use_causal_mask", true)). The value's
// Keras mask hides keys, the query's zeroes output steps and is the output's. return_attention_scores is not built.
LayerPtr Attention(AttentionOptions options = {});
struct AdditiveAttentionOptions {
  bool use_scale = true;  // a learned (d,) scale inside the sum (glorot_uniform)
  float dropout = 0.0f;
  uint64_t seed = 0;
  std::string name = {};
};
// Keras 3's AdditiveAttention (Bahdanau): scores sum_d scale * tanh(q_i + k_j); otherwise as Attention.
LayerPtr AdditiveAttention(AdditiveAttentionOptions options = {});

// ---------------------------------------------------------------- Keras layers composed of the general ops
// Activation layers (Keras 3's classes, keys and defaults).
struct ReLUOptions {
  std::optional<float> max_value = std::nullopt;  // Keras' None: no upper bound (6: relu6, MobileNetV2's)
  float negative_slope = 0.0f;
  float threshold = 0.0f;  // values <= threshold map to 0 (NaN too, as Keras' where(x > threshold, x, 0))
  std::string name = {};
};
LayerPtr ReLU(ReLUOptions options = {});
LayerPtr LeakyReLU(float negative_slope = 0.3f, std::string name = {});  // Keras' default 0.3
struct PReLUOptions {
  std::string alpha_initializer = "zeros";
  std::vector<int64_t> shared_axes = {};  // 1-based axes where alpha has size 1 (e.g. {1, 2} for images)
  std::string name = {};
};
// relu(x) - alpha * relu(-x); alpha (trainable) has the sample shape with 1 on the shared axes.
LayerPtr PReLU(PReLUOptions options = {});
LayerPtr ELU(float alpha = 1.0f, std::string name = {});
LayerPtr Softmax(int axis = -1, std::string name = {});
LayerPtr Softmax(std::vector<int> axes, std::string name = {});  // exp(x - logsumexp(x, axes))
// Elementwise merges with Keras' broadcasting: a lower-rank input gets size-1 axes after the batch axis, then the
// shapes broadcast (size 1 against any). Subtract takes exactly two inputs; Average divides the sum by the count.
LayerPtr Subtract(std::string name = {});
LayerPtr Multiply(std::string name = {});
LayerPtr Average(std::string name = {});
LayerPtr Maximum(std::string name = {});
LayerPtr Minimum(std::string name = {});
// Permutes the axes after the batch: dims a permutation of 1..rank-1 (Keras' Permute((2, 1))).
LayerPtr Permute(std::vector<int64_t> dims, std::string name = {});
LayerPtr RepeatVector(int64_t n, std::string name = {});  // (N, F) -> (N, n, F)
LayerPtr Identity(std::string name = {});
// Passes its input on and adds l1 * sum(|x|) + l2 * sum(x^2), divided by the batch size, to the loss of fit and
// evaluate (Keras' ActivityRegularization; trainkit/nn/regularizers.h).
LayerPtr ActivityRegularization(float l1 = 0.0f, float l2 = 0.0f, std::string name = {});
// Training-only noise (evaluate and predict pass the input on), drawn anew each step from `seed` (0: from the global
// seed): x + N(0, stddev^2) per element, stddev in [0, 1] (Keras' GaussianNoise); x * N(1, rate / (1 - rate)), rate
// in [0, 1) (Keras' GaussianDropout).
LayerPtr GaussianNoise(float stddev, uint64_t seed = 0, std::string name = {});
LayerPtr GaussianDropout(float rate, uint64_t seed = 0, std::string name = {});
// Training-only image augmentation (Keras' RandomFlip): each image of (N, H, W, C) flipped with probability 1/2;
// mode "horizontal" (W), "vertical" (H) or "horizontal_and_vertical" (both, under one draw, as Keras).
LayerPtr RandomFlip(std::string mode = "horizontal_and_vertical", uint64_t seed = 0, std::string name = {});
// Keras' Dot: the dot product of two inputs along axes (one axis for both, or a pair; negative from the end): two
// (N, d) -> (N, 1); two (N, a, b) -> the first's other axis by the second's (a BatchMatMul). normalize: each input
// L2-normalized along its axis first (Keras' ops.normalize).
LayerPtr Dot(std::vector<int64_t> axes, bool normalize = false, std::string name = {});
// Keras' CenterCrop on (N, H, W, C): the central height x width window (start (H - height) / 2, rounded down), in
// training and inference alike. An input smaller than the crop on either axis is resized instead, as Keras'
// smart_resize: its largest central window of the crop's aspect ratio, bilinearly resized to height x width.
LayerPtr CenterCrop(int64_t height, int64_t width, std::string name = {});
// Keras' Resizing on (N, H, W, C): every image to height x width (keras.ops.image.resize with half-pixel centers,
// antialias=False), optionally after a central crop (crop_to_aspect_ratio) or fill_value bands (pad_to_aspect_ratio)
// to the target's aspect ratio. Differentiable; in training and inference alike.
struct ResizingOptions {
  std::string interpolation = "bilinear";  // or "nearest"
  bool crop_to_aspect_ratio = false;
  bool pad_to_aspect_ratio = false;
  float fill_value = 0.0f;  // pad_to_aspect_ratio's bands
  std::string name = {};
};
LayerPtr Resizing(int64_t height, int64_t width, const ResizingOptions& options = {});
// Keras' random affine augmentations on (N, H, W, C), training only (identity in evaluate/predict): each image gets
// its own transform, sampled with fill_mode outside the image. A factor is a number f, meaning (-|f|, f), or a
// (lower, upper) range within [-1, 1]:
//   RandomTranslation(0.1, 0.2)   shifts by up to 10% of the height and 20% of the width
//   RandomRotation(0.05)          rotates by up to 0.05 * 360 degrees about the center
//   RandomZoom(0.2)               scales by 1 + u, u in [-0.2, 0.2] (zooms out above 1), both axes alike unless
//                                 width_factor is given
struct FactorRange {
  float lower, upper;
  FactorRange(float f) : lower(-std::abs(f)), upper(std::abs(f)) {}  // NOLINT: Keras' single number
  FactorRange(float low, float high) : lower(std::min(low, high)), upper(std::max(low, high)) {}
};
struct RandomAffineOptions {
  std::string fill_mode = "reflect";       // "constant", "nearest", "wrap", "mirror", "reflect" (Keras')
  std::string interpolation = "bilinear";  // or "nearest"
  float fill_value = 0.0f;                 // fill_mode "constant"'s value
  uint64_t seed = 0;                       // 0: from the global seed
  std::string name = {};
};
LayerPtr RandomTranslation(FactorRange height_factor, FactorRange width_factor, RandomAffineOptions options = {});
LayerPtr RandomRotation(FactorRange factor, RandomAffineOptions options = {});
LayerPtr RandomZoom(FactorRange height_factor, std::optional<FactorRange> width_factor = std::nullopt,
                    RandomAffineOptions options = {});
struct RandomContrastOptions {
  std::array<float, 2> value_range = {0.0f, 255.0f};  // the output is clipped to it
  uint64_t seed = 0;                                  // 0: from the global seed
  std::string name = {};
};
// Training-only (Keras' RandomContrast): per image one factor f uniform in [1 - lower, 1 + upper]; (x - mean) * f +
// mean with the mean per image and channel, clipped to value_range. A single factor is Keras 3's (0, factor): f in
// [1, 1 + factor]. Factors in [0, 1].
LayerPtr RandomContrast(float factor, RandomContrastOptions options = {});
LayerPtr RandomContrast(float lower, float upper, RandomContrastOptions options = {});
LayerPtr Cropping2D(Size2 cropping = 0, std::string name = {});  // symmetric, channels_last
LayerPtr Cropping2D(int64_t top, int64_t bottom, int64_t left, int64_t right, std::string name = {});

// Keras 3's Normalization: y = (x - mean) / maximum(sqrt(variance), 1e-7) (invert: mean + x * that), mean and
// variance over the kept `axis` (default the last), broadcast over the rest. Without a given mean/variance they are
// non-trainable weights mean, variance and count (Keras' names; set by adapt() or read from a Keras file).
struct NormalizationOptions {
  std::vector<int> axis = {-1};  // the kept axes (Keras' axis=None: {}, one mean for everything)
  std::optional<std::vector<float>> mean = std::nullopt;      // a scalar or one value per element of the kept axes
  std::optional<std::vector<float>> variance = std::nullopt;  // given with mean
  bool invert = false;
  std::string name = {};
};
LayerPtr Normalization(NormalizationOptions options = {});
// Keras' Normalization.adapt(data): mean and (biased) variance of `data` (batch first) over all axes but the kept
// ones, into the layer's weights; builds the layer from data's shape if needed.
void adapt(const LayerPtr& normalization, const Tensor& data);
}  // namespace layers
}  // namespace tk
