// The CUDA kernels' launchers (activations.cu, optimizers.cu): plain C++ signatures, so that the code registering
// them as kernels (cuda_kernels.cpp) is compiled by the host compiler and only the kernels themselves by nvcc. Each
// launches on `stream` (a cudaStream_t) and returns at once; a launch error throws tk::Error naming the kernel.
//
//   tk::cuda::launch_activation(tk::cuda::Activation::gelu, x, y, n, 0.0f, sm_count, stream);
#pragma once
#include <cstdint>

#include "backends/math/affine.h"
#include "backends/math/constraints.h"
#include "backends/math/resize.h"

namespace tk::cuda {

using Stream = void*;  // cudaStream_t

// The activations of backends/math/activations.h (the same functions, compiled by nvcc).
enum class Activation : int { relu, sigmoid, tanh, gelu, elu, leaky_relu };
// y = f(x, alpha)
void launch_activation(Activation f, const float* x, float* y, int64_t n, float alpha, int sm_count, Stream stream);
// dx = f'(dy, v, alpha), v being x or y as the op's gradient rule takes
void launch_activation_grad(Activation f, const float* dy, const float* v, float* dx, int64_t n, float alpha,
                            int sm_count, Stream stream);
// Softmax over the last axis of (rows, n) and its gradient dx = y * (dy - sum(dy * y)): a warp or a block per row for
// rows of 32 elements or more (group_reduce.h; launch_geometry.h decides), one thread per row otherwise
void launch_softmax(const float* x, float* y, int64_t rows, int64_t n, int sm_count, Stream stream);
void launch_softmax_grad(const float* dy, const float* y, float* dx, int64_t rows, int64_t n, int sm_count,
                         Stream stream);
// Log-softmax over the last axis of (rows, n): math::log_softmax_row, one thread per row
void launch_log_softmax(const float* x, float* y, int64_t rows, int64_t n, int sm_count, Stream stream);
// c = y > 0 ? c : 0 in place (FusedMatMul's relu_grad epilogue after the cuBLASLt product)
void launch_relu_mask(float* c, const float* y, int64_t n, int sm_count, Stream stream);

// y = x * scale[0], the scale read on the device (AllReduce with one replica: the gradient times its share)
void launch_scale(const float* x, float* y, int64_t n, const float* scale, int sm_count, Stream stream);

// Elementwise and bias ops (elementwise.cu), as the CPU kernels compute them.
void launch_fill(float* y, int64_t n, float value, int sm_count, Stream stream);
// y = x[0] + x[1] + ... + x[k-1], summed left to right; k <= 6
void launch_add(const float* const* x, int k, float* y, int64_t n, int sm_count, Stream stream);
void launch_mul(const float* a, const float* b, float* y, int64_t n, int sm_count, Stream stream);
// y = x * k + b
void launch_scale_shift(const float* x, float* y, int64_t n, float k, float b, int sm_count, Stream stream);
// y(rows, n) = x + bias(n)
void launch_bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t n, int sm_count, Stream stream);
// db(n) = column sums of dy(rows, n) in double: fixed chunks of rows summed in row order, then the chunks in order
// (deterministic; `partials` holds bias_grad_chunks(rows) * n doubles).
int64_t bias_grad_chunks(int64_t rows);
void launch_bias_grad(const float* dy, float* db, int64_t rows, int64_t n, double* partials, int sm_count,
                      Stream stream);
// BatchNormalization (batchnorm.cu) over x(m, c), channels last, with the math of backends/math/batchnorm.h;
// stats(2, c) = [mean; biased variance]. The per-channel sums are launch_bias_grad's deterministic two passes in
// double; `ws` holds bn_workspace_doubles(m, c) doubles.
int64_t bn_workspace_doubles(int64_t m, int64_t c);
void launch_bn_stats(const float* x, float* stats, int64_t m, int64_t c, double* ws, int sm_count, Stream stream);
// Synchronized (BnStats and BnInputGrad with attrs.collective): the phases the kernel queues its all-reduces between,
// on the same stream. `sync` holds bn_sync_floats(c) floats: [sums(c), rows(2), squares(c), weight] for the
// statistics (all-reduce [0, c + 2), then [c + 2, 2c + 2), both weighted by sync[2c + 2]: 1, or 0 for a stand-in row
// whose *share is 0), and the global [sum(dy); sum(dy * xhat)] (2, c) for the input gradient (weighted by *share).
int64_t bn_sync_floats(int64_t c);
void launch_bn_sync_local_sums(const float* x, int64_t m, int64_t c, double* ws, float* sync, const float* share,
                               int sm_count, Stream stream);
void launch_bn_sync_centered_squares(const float* x, int64_t m, int64_t c, double* ws, float* sync, int sm_count,
                                     Stream stream);
void launch_bn_sync_stats(int64_t m, int64_t c, double* ws, const float* sync, float* stats, int sm_count,
                          Stream stream);
void launch_bn_sync_grad_sums(const float* dy, const float* x, const float* stats, int64_t m, int64_t c, float eps,
                              double* ws, float* sync, int sm_count, Stream stream);
void launch_bn_sync_input_grad(const float* dy, const float* x, const float* stats, const float* gamma,
                               const float* sync, const float* share, float* dx, int64_t m, int64_t c, float eps,
                               int sm_count, Stream stream);
// y = gamma * (x - mean) / sqrt(var + eps) + beta, mean/var/gamma/beta (c) (BnApply: mean and var from stats)
void launch_bn_normalize(const float* x, const float* mean, const float* var, const float* gamma, const float* beta,
                         float* y, int64_t m, int64_t c, float eps, int sm_count, Stream stream);
// dx(m, c) through the batch statistics (BnInputGrad); dgamma(c) = sum(dy * xhat) (BnGammaGrad)
void launch_bn_input_grad(const float* dy, const float* x, const float* stats, const float* gamma, float* dx, int64_t m,
                          int64_t c, float eps, double* ws, int sm_count, Stream stream);
void launch_bn_gamma_grad(const float* dy, const float* x, const float* stats, float* dgamma, int64_t m, int64_t c,
                          float eps, double* ws, int sm_count, Stream stream);
// With the moving statistics: dx = dy * gamma / sqrt(var + eps); dgamma = sum(dy * (x - mean) / sqrt(var + eps))
void launch_bn_inference_grad(const float* dy, const float* var, const float* gamma, float* dx, int64_t m, int64_t c,
                              float eps, int sm_count, Stream stream);
void launch_bn_inference_gamma_grad(const float* dy, const float* x, const float* mean, const float* var, float* dgamma,
                                    int64_t m, int64_t c, float eps, double* ws, int sm_count, Stream stream);
// mean(c), var(c) = moving * momentum + stats(2, c) * (1 - momentum), in place
void launch_bn_update_moving(const float* stats, float* mean, float* var, int64_t c, float momentum, int sm_count,
                             Stream stream);

// acc += g * scale[0], the scale read on the device (micro-batching's share)
void launch_accumulate(float* acc, const float* g, int64_t n, const float* scale, int sm_count, Stream stream);

// Dropout's mask (backends/math/random.h): the same draws as the CPU's, keyed by (node seed, step, global sample);
// step and first_row (StepScalars::step, ::sample_offset) read on the device.
void launch_dropout_mask(float* y, int64_t n, uint64_t node_seed, const uint64_t* step, const int64_t* first_row,
                         float rate, bool spatial, int64_t per_sample, int64_t channels, int64_t per_row, int sm_count,
                         Stream stream);
// RandomUniform (normal = false) / RandomNormal: backends/math/random.h's values, keyed as the CPU kernel keys them
void launch_random_values(float* y, int64_t n, bool normal, uint64_t node_seed, const uint64_t* step,
                          const int64_t* first_row, int64_t per_row, int sm_count, Stream stream);

// Mean squared error, binary crossentropy (from logits or probabilities) and binary accuracy: the mean over all n
// elements of the per-element math of backends/math/losses.h, summed in double and in order as on the CPU.
// `scratch` holds n doubles.
enum class ElementLoss : int { mse, bce_logits, bce_probabilities, binary_accuracy };
void launch_element_loss(ElementLoss kind, const float* p, const float* t, float* out, int64_t n, double* scratch,
                         int sm_count, Stream stream);
// Their gradients (mse, bce_*): g = d(mean)/dp times dy[0] (read on the device; null: 1)
void launch_element_loss_grad(ElementLoss kind, const float* p, const float* t, const float* dy, float* g, int64_t n,
                              int sm_count, Stream stream);
// Categorical crossentropy (dense targets, rows x classes) and its gradient, categorical accuracy; `rows_scratch`
// holds `rows` doubles.
void launch_cce(const float* x, const float* targets, float* loss, int64_t rows, int64_t classes, bool from_logits,
                double* rows_scratch, int sm_count, Stream stream);
void launch_cce_grad(const float* x, const float* targets, const float* dy, float* g, int64_t rows, int64_t classes,
                     bool from_logits, int sm_count, Stream stream);
void launch_categorical_accuracy(const float* x, const float* targets, float* out, int64_t rows, int64_t classes,
                                 double* rows_scratch, int sm_count, Stream stream);

// StepControl (step_control.cu): the global sum of squares of the step's gradients, then the shared rule
// (backends/math/optimizers.h, step_control_finish) writes out[0..1] and updates the loss-scale state in place (null
// without scaling). dtype: tk::DType's number (f32 0, f16 1, bf16 2). `partials` holds count * kStepControlBlocks
// doubles.
inline constexpr int kStepControlBlocks = 64;
struct StepControlGradient {
  const void* data;
  int64_t n;
  int dtype;
};
void launch_step_control(const StepControlGradient* grads, int count, float global_clipnorm, bool skip_nonfinite,
                         bool scaling, int64_t growth_steps, float* out, float* state, double* partials, Stream stream);

// Ops that move values (layout.cu). An NHWC image block's dimensions:
struct Image {
  int64_t n, h, w, c;
};
// y(rows, sum widths) = [x_0 | x_1 | ...] over the last axis (k blocks)
void launch_concat(const float* const* x, const int64_t* widths, int k, float* y, int64_t rows, int sm_count,
                   Stream stream);
// y(rows, size) = x(rows, width)[:, begin:begin + size]
void launch_slice(const float* x, float* y, int64_t rows, int64_t width, int64_t begin, int64_t size, int sm_count,
                  Stream stream);
// y(outer, len, inner) = x(outer, len - 1 - j, inner): Reverse along an axis, elements of elem_bytes (1, 2, 4, 8)
void launch_reverse(const void* x, void* y, int elem_bytes, int64_t outer, int64_t len, int64_t inner, int sm_count,
                    Stream stream);
// dst = src shifted by (dh, dw) pixels, zeros elsewhere (Pad2D: +top, +left; Crop2D: -top, -left)
void launch_shifted(const float* src, Image s, float* dst, Image d, int64_t dh, int64_t dw, int sm_count,
                    Stream stream);
// Nearest-neighbour upsampling by (fh, fw) and its gradient
// Keras' image affine transform and its gradient (backends/math/affine.h), NHWC float32, t (N, 8)
void launch_affine(const float* x, const float* t, float* y, const math::AffineLayout& l, int sm_count, Stream stream);
void launch_affine_grad(const float* dy, const float* t, float* dx, const math::AffineLayout& l, int sm_count,
                        Stream stream);
// Keras' image resize and its gradient (backends/math/resize.h), NHWC float32
void launch_resize(const float* x, float* y, const math::ResizeLayout& l, int sm_count, Stream stream);
void launch_resize_grad(const float* dy, float* dx, const math::ResizeLayout& l, int sm_count, Stream stream);
void launch_upsample(const float* x, Image xs, float* y, Image ys, int64_t fh, int64_t fw, int sm_count, Stream stream);
void launch_upsample_grad(const float* dy, Image ys, float* dx, Image xs, int64_t fh, int64_t fw, int sm_count,
                          Stream stream);

// y = x converted element by element (cast.cu, over core/convert_one.h: the CPU's rules and bits). `from` and `to`
// are tk::DType's numbers (f32 0, f16 1, bf16 2, i32 3, i64 4, u8 5, bool 6); equal dtypes copy the bytes.
void launch_cast(const void* x, int from, void* y, int to, int64_t n, int sm_count, Stream stream);

// Sparse categorical crossentropy and accuracy (losses.cu) over the per-row math of backends/math/losses.h. The
// batch mean sums the rows in double and in order, as the CPU does. `rows_scratch` holds `rows` doubles. A label
// outside [0, classes) makes that row's loss NaN (the host cannot throw from a kernel; the CPU kernel's error names
// the row).
void launch_sparse_cce(const float* x, const int32_t* labels, float* loss, int64_t rows, int64_t classes,
                       bool from_logits, double* rows_scratch, int sm_count, Stream stream);
// g = dy[0] / rows * (softmax(x) - onehot(y)) (dy read on the device; null: 1)
void launch_sparse_cce_grad(const float* x, const int32_t* labels, const float* dy, float* g, int64_t rows,
                            int64_t classes, bool from_logits, int sm_count, Stream stream);
void launch_sparse_accuracy(const float* x, const int32_t* labels, float* out, int64_t rows, int64_t classes,
                            double* rows_scratch, int sm_count, Stream stream);

// Sliding windows (NHWC) for the convolution and pooling kernels (conv_pool.cu): graph::Window's numbers as plain
// values nvcc can take (host code fills them from graph::Window::of).
struct WindowGeo {
  int64_t n, h, w, c;      // input (N, H, W, C)
  int64_t kh, kw, sh, sw;  // kernel, stride
  int64_t dh, dw;          // dilation (convolutions; 1 for pooling)
  int64_t pt, pl;          // padding before (top, left)
  int64_t oh, ow;          // output spatial size
};
// col(count * OH * OW, KH * KW * C) = the windows of images [n0, n0 + count) of x, zeros where a window reads padding
// (the CPU's im2col layout: row (image, oh, ow), column (kh * KW + kw) * C + c).
void launch_im2col(const float* x, const WindowGeo& g, int64_t n0, int64_t count, float* col, int sm_count,
                   Stream stream);
// dx(images [n0, n0 + count)) = the columns of dcol gathered back to the pixels they were read from: each pixel adds
// its (oh, ow, kh, kw) contributions in the order the CPU's col2im scatters them, so the bits match it.
void launch_col2im(const float* dcol, const WindowGeo& g, int64_t n0, int64_t count, float* dx, int sm_count,
                   Stream stream);
// Max / average pooling and their gradients, with the CPU's rules (backends/cpu/pooling.cpp): padding never wins a
// max; the gradient goes to the first maximum of each window in row-major order, or is shared by all ties
// (split_ties); relu: the fused ReluGrad; the average counts only pixels inside the image.
void launch_max_pool(const float* x, const WindowGeo& g, float* y, int sm_count, Stream stream);
void launch_max_pool_grad(const float* dy, const float* x, const float* y, const WindowGeo& g, bool split_ties,
                          bool relu, float* dx, int sm_count, Stream stream);
void launch_avg_pool(const float* x, const WindowGeo& g, float* y, int sm_count, Stream stream);
void launch_avg_pool_grad(const float* dy, const WindowGeo& g, float* dx, int sm_count, Stream stream);

// One variable's optimizer update (backends/math/optimizers.h). Per-step values are read on the device: the
// learning rate and the iteration count from the step's scalars, the StepControl pair [apply, gradient factor]
// when the update is gated (loss scaling, global-norm clipping), so a captured CUDA Graph stays valid.
enum class Rule : int { sgd, adam, rmsprop };
struct UpdateArgs {
  float* w = nullptr;
  const float* g = nullptr;
  // sgd: momentum; adam: m, v; rmsprop: velocity, momentum, average; null where the config uses none (never read)
  float* slot[3] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
  const float* learning_rate = nullptr;  // device memory
  const int64_t* iterations = nullptr;   // device memory
  const float* control = nullptr;        // device memory, or null when not gated
  const float* factor = nullptr;         // device memory: the gradient factor from launch_clipnorm_factor (clipnorm),
                                         // which then replaces control[1]; null without clipnorm
  float weight_decay = 0, clipvalue = 0, momentum = 0, beta_1 = 0, beta_2 = 0, epsilon = 0, rho = 0;
  bool nesterov = false, centered = false;
};
void launch_update(Rule rule, const UpdateArgs& args, int sm_count, Stream stream);
// A Keras weight constraint on a float32 variable, in place (backends/math/constraints.h): one thread per slice.
void launch_constrain(float* w, const math::ConstraintLayout& layout, int sm_count, Stream stream);

// clipnorm (step_control.cu): *factor = math::clipnorm_factor(sum of g^2, clipnorm, control ? control[1] : 1), the sum
// over a fixed grid of kStepControlBlocks partials in double (`partials` holds that many), added in order.
void launch_clipnorm_factor(const float* g, int64_t n, float clipnorm, const float* control, double* partials,
                            float* factor, Stream stream);

}  // namespace tk::cuda
