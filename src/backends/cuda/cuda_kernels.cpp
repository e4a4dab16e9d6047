// Registers the CUDA kernels (cuda_kernels.h): activations and optimizer updates from their launchers
// (launchers.h, compiled by nvcc), MatMul on cuBLASLt (gemm_cublaslt.cpp).
#include "backends/cuda/cuda_kernels.h"

#include <utility>

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/check.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gemm_cublaslt.h"
#include "backends/cuda/launchers.h"
#include "backends/op_layouts.h"
#include "graph/bucket.h"
#include "graph/collective.h"
#include "graph/kernel.h"

namespace tk::cuda {

void register_gemm_kernels();       // gemm_cublaslt.cpp
void register_lstm_kernels();       // lstm.cpp: LstmSequence, LstmSequenceGrad (cuBLASLt GEMMs + lstm.cu)
void register_attention_kernels();  // attention.cpp: Attention, AttentionGrad (attention.cu)
void register_conv_kernels();       // conv.cpp: convolutions (im2col + cuBLASLt) and pooling
void register_widened_kernels();    // widen.cpp: float16/bfloat16 over the float32 kernels, registered last
void register_tensor_kernels();     // tensor_kernels.cpp: the general tensor ops (graph/op.h from Unary on)

int sm_count(int index) {
  static std::mutex m;
  static std::array<int, 64> known{};
  if (index < 0 || index >= static_cast<int>(known.size())) return 0;
  std::lock_guard lock(m);
  int& n = known[static_cast<size_t>(index)];
  if (n == 0 && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, index) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error; the geometry falls back to its default
    n = 0;
  }
  return n;
}

namespace {
using graph::KernelArgs;
using graph::Op;

int sms(const KernelArgs& a) { return sm_count(a.ctx.device.index); }

template <Activation F>
void activation(const KernelArgs& a) {
  launch_activation(F, a.input<float>(0), a.output<float>(), a.node.shape.numel(), a.node.attrs.alpha, sms(a),
                    a.ctx.stream);
}
template <Activation F>
void activation_grad(const KernelArgs& a) {
  launch_activation_grad(F, a.input<float>(0), a.input<float>(1), a.output<float>(), a.node.shape.numel(),
                         a.node.attrs.alpha, sms(a), a.ctx.stream);
}

Rule rule_of(Op op) { return op == Op::AdamUpdate ? Rule::adam : op == Op::RmspropUpdate ? Rule::rmsprop : Rule::sgd; }

// clipnorm's scratch per variable: the sum-of-squares partials and the factor. Reserved whether or not clipnorm is on
// when the program is built: a callback may turn it on later through Optimizer::config() (the update kernel decides
// when it is queued; a captured graph is dropped for it, graph/step_capture.h), and the workspace is a maximum over
// the program's kernels, not a sum (576 bytes per variable).
constexpr size_t kClipnormBytes = kStepControlBlocks * sizeof(double) + 64;
size_t update_workspace(const graph::Graph& g, int node) {
  const graph::Node& n = g[node];
  if (!n.attrs.update) return 0;
  return static_cast<size_t>(n.op == Op::MultiUpdate ? n.attrs.size : 1) * kClipnormBytes;
}

// The variables of an update node: [weights..., gradients..., slots (per variable)..., (StepControl)], count variables
// (MultiUpdate: attrs.size; the single-variable ops: 1), the slots those its config uses (graph::update_slot_mask; an
// unused one is a null pointer the kernel never reads). One launch per variable.
void update(const KernelArgs& a) {
  const graph::UpdateConfig& c = *a.node.attrs.update;
  const bool multi = a.node.op == Op::MultiUpdate;
  const Op rule_op = multi ? a.node.attrs.epilogue : a.node.op;
  const Rule rule = rule_of(rule_op);
  const int count = multi ? static_cast<int>(a.node.attrs.size) : 1;
  const int mask = graph::update_slot_mask(rule_op, c), slots = graph::update_slot_count(rule_op, c);
  // The config is shared and mutable: a momentum turned on after the program was built would need a slot with no
  // memory.
  const size_t operands = a.node.inputs.size() - (a.node.attrs.gated ? 1 : 0);
  if (operands != static_cast<size_t>(count) * static_cast<size_t>(2 + slots))
    throw Error("'" + a.node.name + "': the optimizer's config now uses " + std::to_string(slots) +
                " slot(s) per variable but the update was built with " +
                std::to_string(operands / static_cast<size_t>(count) - 2) +
                " (momentum and centered cannot change after the first step: compile again)");
  // Per-step values stay on the device: the kernels read them there.
  UpdateArgs u;
  u.learning_rate = &a.scalars->learning_rate;  // addresses in device memory, never read on the host
  u.iterations = &a.scalars->iterations;
  u.control = a.node.attrs.gated ? static_cast<const float*>(a.in[a.node.inputs.size() - 1]) : nullptr;
  u.weight_decay = c.weight_decay;
  u.clipvalue = c.clipvalue;
  u.momentum = c.momentum;
  u.beta_1 = c.beta_1;
  u.beta_2 = c.beta_2;
  u.epsilon = c.epsilon;
  u.rho = c.rho;
  u.nesterov = c.nesterov;
  u.centered = c.centered;
  for (int k = 0; k < count; ++k) {
    u.w = a.inout<float>(k);
    u.g = a.input<float>(count + k);
    for (int j = 0, in = 2 * count + k * slots; j < 3; ++j)
      u.slot[j] = mask & (1 << j) ? a.inout<float>(in++) : nullptr;
    u.n = a.in_shape(k).numel();
    if (c.clipnorm > 0.0f) {  // this variable's clip factor, into its slice of the workspace
      auto* partials =
          reinterpret_cast<double*>(static_cast<char*>(a.workspace) + static_cast<size_t>(k) * kClipnormBytes);
      auto* factor = reinterpret_cast<float*>(partials + kStepControlBlocks);
      launch_clipnorm_factor(u.g, u.n, c.clipnorm, u.control, partials, factor, a.ctx.stream);
      u.factor = factor;
    }
    launch_update(rule, u, sms(a), a.ctx.stream);
  }
  if (a.node.attrs.zero_grad)  // micro-batching: the accumulators this update consumed start the next step at 0
    for (int k = count; k < 2 * count; ++k)
      check(cudaMemsetAsync(a.inout<float>(k), 0, sizeof(float) * static_cast<size_t>(a.in_shape(k).numel()),
                            static_cast<cudaStream_t>(a.ctx.stream)),
            "cudaMemsetAsync", "zeroing the gradient accumulators of '" + a.node.name + "'");
}

// (variable) -> the variable constrained in place, after its update (the schedule orders it so).
void constrain(const KernelArgs& a) {
  launch_constrain(a.inout<float>(0), backends::constraint_layout(a.in_shape(0), a.node.attrs), sms(a), a.ctx.stream);
}

// (grad) -> sum over replicas of grad * grad_scale, through the replicas' NCCL group when there is one
// (graph/collective.h: queued on the stream, weight read on the device); zero_grad clears the accumulator after.
void all_reduce(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const size_t k = a.node.inputs.size();
  const auto stream = static_cast<cudaStream_t>(a.ctx.stream);
  auto checked = [&](cudaError_t e, const char* call, const char* doing) {  // the message only on an error
    if (e != cudaSuccess) check(e, call, std::string(doing) + " '" + a.node.name + "'");
  };
  float* y = a.output<float>();
  const float* x = y;
  if (k == 1) {
    x = a.input<float>(0);
  } else {  // a bucket (graph/bucket.h): packed at its offsets, padding zeroed, then reduced in place
    int64_t at = 0;
    for (size_t i = 0; i < k; ++i) {
      const int64_t len = a.in_shape(static_cast<int>(i)).numel(), slot = graph::bucket_slot(len);
      checked(cudaMemcpyAsync(y + at, a.input<float>(static_cast<int>(i)), sizeof(float) * static_cast<size_t>(len),
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync", "packing the bucket");
      if (slot > len)
        checked(cudaMemsetAsync(y + at + len, 0, sizeof(float) * static_cast<size_t>(slot - len), stream),
                "cudaMemsetAsync", "packing the bucket");
      at += slot;
    }
  }
  const float* share = &a.scalars->grad_scale;
  if (graph::Collective* c = a.node.attrs.collective) {
    if (a.node.attrs.overlap)  // its AllReduceWait makes the stream wait for the sum
      c->start_all_reduce_async(a.node.attrs.replica, x, y, n, share, a.ctx.stream, a.node.name.c_str(),
                                a.node.attrs.begin);
    else
      c->all_reduce_async(a.node.attrs.replica, x, y, n, share, a.ctx.stream, a.node.name.c_str(), a.node.attrs.begin);
  } else {
    launch_scale(x, y, n, share, sms(a), a.ctx.stream);
  }
  if (a.node.attrs.zero_grad)
    for (size_t i = 0; i < k; ++i)
      checked(cudaMemsetAsync(a.inout<float>(static_cast<int>(i)), 0,
                              sizeof(float) * static_cast<size_t>(a.in_shape(static_cast<int>(i)).numel()), stream),
              "cudaMemsetAsync", "clearing the accumulators of");
}

// (a started AllReduce) -> the same memory: the stream's later work (the sum's readers) waits for the reduction,
// which ran beside the rest of the backward pass (NCCL: on its communication stream).
void all_reduce_wait(const KernelArgs& a) {
  const graph::Node& started = a.g[a.node.inputs[0]];
  if (graph::Collective* c = started.attrs.collective)
    c->finish_all_reduce_async(started.attrs.replica, started.attrs.begin, a.ctx.stream);
}

// Softmax over the last axis: (rows, n) of the node's shape.
std::pair<int64_t, int64_t> rows_and_width(const KernelArgs& a) {
  const int64_t n = a.node.shape[-1];
  return {a.node.shape.numel() / (n ? n : 1), n};
}
void softmax(const KernelArgs& a) {
  const auto [rows, n] = rows_and_width(a);
  launch_softmax(a.input<float>(0), a.output<float>(), rows, n, sms(a), a.ctx.stream);
}
void log_softmax(const KernelArgs& a) {
  const auto [rows, n] = rows_and_width(a);
  launch_log_softmax(a.input<float>(0), a.output<float>(), rows, n, sms(a), a.ctx.stream);
}
void softmax_grad(const KernelArgs& a) {
  const auto [rows, n] = rows_and_width(a);
  launch_softmax_grad(a.input<float>(0), a.input<float>(1), a.output<float>(), rows, n, sms(a), a.ctx.stream);
}

void fill(const KernelArgs& a) {
  launch_fill(a.output<float>(), a.node.shape.numel(), a.node.attrs.value, sms(a), a.ctx.stream);
}
void add(const KernelArgs& a) {
  const int k = static_cast<int>(a.node.inputs.size());
  if (k > 6) throw Unsupported("Add '" + a.node.name + "' with " + std::to_string(k) + " inputs on CUDA (at most 6)");
  const float* x[6] = {};
  for (int j = 0; j < k; ++j) x[j] = a.input<float>(j);
  launch_add(x, k, a.output<float>(), a.node.shape.numel(), sms(a), a.ctx.stream);
}
void mul(const KernelArgs& a) {
  launch_mul(a.input<float>(0), a.input<float>(1), a.output<float>(), a.node.shape.numel(), sms(a), a.ctx.stream);
}
void scale(const KernelArgs& a) {
  launch_scale_shift(a.input<float>(0), a.output<float>(), a.node.shape.numel(), a.node.attrs.scale,
                     a.node.attrs.offset, sms(a), a.ctx.stream);
}
void reshape(const KernelArgs& a) {
  check(cudaMemcpyAsync(a.out, a.in[0], static_cast<size_t>(a.node.shape.numel()) * dtype_size(a.node.dtype),
                        cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(a.ctx.stream)),
        "cudaMemcpyAsync", "Reshape '" + a.node.name + "'");
}
void bias_add(const KernelArgs& a) {
  const int64_t n = a.node.shape[-1], rows = a.node.shape.numel() / (n ? n : 1);
  launch_bias_add(a.input<float>(0), a.input<float>(1), a.output<float>(), rows, n, sms(a), a.ctx.stream);
}
size_t bias_grad_workspace(const graph::Graph& g, int node) {
  const int64_t n = g[node].shape[0], rows = g[g[node].inputs[0]].shape.numel() / (n ? n : 1);
  return static_cast<size_t>(bias_grad_chunks(rows) * n) * sizeof(double);
}
void bias_grad(const KernelArgs& a) {
  const int64_t n = a.node.shape[0], rows = a.in_shape(0).numel() / (n ? n : 1);
  launch_bias_grad(a.input<float>(0), a.output<float>(), rows, n, static_cast<double*>(a.workspace), sms(a),
                   a.ctx.stream);
}
size_t side_offset(size_t before) { return (before + 255) / 256 * 256; }
void activation_grad_relu(const KernelArgs& a) {
  activation_grad<Activation::relu>(a);
  if (a.side_out) launch_side_bias_grad(a, a.output<float>(), 0);
}
size_t relu_grad_workspace(const graph::Graph& g, int node) { return side_bias_grad_workspace(g, node, 0); }
void accumulate_grad(const KernelArgs& a) {
  launch_accumulate(a.inout<float>(0), a.input<float>(1), a.in_shape(0).numel(), &a.scalars->grad_scale, sms(a),
                    a.ctx.stream);
}

template <bool Normal>
void random_values(const KernelArgs& a) {  // as backends/cpu/elementwise.cpp's, on the device
  const Shape& s = a.node.shape;
  const int64_t n = s.numel(), rows = s.rank() && s[0] > 0 ? s[0] : 1;
  launch_random_values(a.output<float>(), n, Normal, a.node.attrs.seed, &a.scalars->step, &a.scalars->sample_offset,
                       n / rows, sms(a), a.ctx.stream);
}

void dropout_mask(const KernelArgs& a) {  // as backends/cpu/elementwise.cpp's, on the device
  const Shape& s = a.node.shape;
  const int64_t n = s.numel();
  const bool spatial = a.node.attrs.spatial && s.rank() == 4;
  const int64_t c = s.rank() ? s[-1] : 1, rows = s.rank() && s[0] > 0 ? s[0] : 1;
  launch_dropout_mask(a.output<float>(), n, a.node.attrs.seed, &a.scalars->step, &a.scalars->sample_offset,
                      a.node.attrs.rate, spatial, spatial ? s[1] * s[2] * c : 1, c, n / rows, sms(a), a.ctx.stream);
}

// The sparse loss and metric: (x(rows, classes), labels(rows) int32 [, dy]).
struct LossDims {
  int64_t rows, classes;
};
LossDims loss_dims(const graph::Graph& g, const graph::Node& n) {
  const Shape& p = g[n.inputs[0]].shape;
  const int64_t c = p.rank() > 1 ? p[-1] : 1;
  return {p.numel() / (c ? c : 1), c};
}
void sparse_cce(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_sparse_cce(a.input<float>(0), a.input<int32_t>(1), a.output<float>(), d.rows, d.classes,
                    a.node.attrs.from_logits, static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
void sparse_cce_grad(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_sparse_cce_grad(a.input<float>(0), a.input<int32_t>(1), a.input<float>(2), a.output<float>(), d.rows,
                         d.classes, a.node.attrs.from_logits, sms(a), a.ctx.stream);
}
void sparse_accuracy(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_sparse_accuracy(a.input<float>(0), a.input<int32_t>(1), a.output<float>(), d.rows, d.classes,
                         static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
// Cast between any two dtypes (cast.cu over core/convert_one.h, the CPU's element rules); the dtypes go to nvcc's
// side as their numbers.
static_assert(static_cast<int>(DType::f32) == 0 && static_cast<int>(DType::f16) == 1 &&
                  static_cast<int>(DType::bf16) == 2 && static_cast<int>(DType::i32) == 3 &&
                  static_cast<int>(DType::i64) == 4 && static_cast<int>(DType::u8) == 5 &&
                  static_cast<int>(DType::boolean) == 6 && kDTypeCount == 7,
              "cast.cu numbers the dtypes as tk::DType does");
void cast(const KernelArgs& a) {
  launch_cast(a.in[0], static_cast<int>(a.in_dtypes[0]), a.out, static_cast<int>(a.out_dtype), a.node.shape.numel(),
              sms(a), a.ctx.stream);
}
// Mean squared error, binary crossentropy, binary accuracy: (p, t [, dy]) of the same shape, the mean over all
// elements.
ElementLoss element_kind(const graph::Node& n) {
  if (n.op == Op::MseLoss || n.op == Op::MseLossGrad) return ElementLoss::mse;
  if (n.op == Op::BinaryAccuracy) return ElementLoss::binary_accuracy;
  return n.attrs.from_logits ? ElementLoss::bce_logits : ElementLoss::bce_probabilities;
}
void element_loss(const KernelArgs& a) {
  launch_element_loss(element_kind(a.node), a.input<float>(0), a.input<float>(1), a.output<float>(),
                      a.in_shape(0).numel(), static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
void element_loss_grad(const KernelArgs& a) {
  launch_element_loss_grad(element_kind(a.node), a.input<float>(0), a.input<float>(1), a.input<float>(2),
                           a.output<float>(), a.in_shape(0).numel(), sms(a), a.ctx.stream);
}
size_t elements_workspace(const graph::Graph& g, int node) {  // one double per element
  return static_cast<size_t>(g[g[node].inputs[0]].shape.numel()) * sizeof(double);
}
// Categorical crossentropy and accuracy: (x(rows, classes), targets(rows, classes) [, dy]).
void cce(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_cce(a.input<float>(0), a.input<float>(1), a.output<float>(), d.rows, d.classes, a.node.attrs.from_logits,
             static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
void cce_grad(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_cce_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.output<float>(), d.rows, d.classes,
                  a.node.attrs.from_logits, sms(a), a.ctx.stream);
}
void categorical_accuracy(const KernelArgs& a) {
  const LossDims d = loss_dims(a.g, a.node);
  launch_categorical_accuracy(a.input<float>(0), a.input<float>(1), a.output<float>(), d.rows, d.classes,
                              static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
// StepControl: (gradients... [, loss-scale state]) -> [apply, factor]; each gradient read in its own dtype.
void step_control(const KernelArgs& a) {
  const graph::UpdateConfig& c = *a.node.attrs.update;
  const bool scaling = c.loss_scale_initial > 0.0f;
  const size_t count = a.node.inputs.size() - (scaling ? 1 : 0);
  thread_local std::vector<StepControlGradient> grads;  // grows once: no allocation per step after the first
  grads.resize(count);
  for (size_t j = 0; j < count; ++j)
    grads[j] = {a.in[j], a.in_shape(static_cast<int>(j)).numel(), static_cast<int>(a.in_dtypes[j])};
  float* state = scaling ? const_cast<float*>(static_cast<const float*>(a.in[count])) : nullptr;
  launch_step_control(grads.data(), static_cast<int>(count), c.global_clipnorm, c.skip_nonfinite, scaling,
                      c.loss_scale_growth_steps, a.output<float>(), state, static_cast<double*>(a.workspace),
                      a.ctx.stream);
}
size_t step_control_workspace(const graph::Graph& g, int node) {
  return g[node].inputs.size() * kStepControlBlocks * sizeof(double);
}

// Concat / Slice over the last axis; Pad2D, Crop2D, Upsample2D (NHWC).
// Along an axis a tensor is (outer, axis * inner) rows: Concat and Slice there are the last-axis kernels' copies of
// column blocks, with widths multiplied by inner.
int64_t outer_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = 0; d < axis; ++d) n *= s[d];
  return n;
}
int64_t inner_of(const Shape& s, int axis) {
  int64_t n = 1;
  for (int d = axis + 1; d < s.rank(); ++d) n *= s[d];
  return n;
}
void concat(const KernelArgs& a) {
  const int k = static_cast<int>(a.node.inputs.size());
  const int axis = a.node.attrs.axis < 0 ? a.node.attrs.axis + a.node.shape.rank() : a.node.attrs.axis;
  const int64_t inner = inner_of(a.node.shape, axis);
  thread_local std::vector<const float*> x;  // grow once: no allocation per step after the first
  thread_local std::vector<int64_t> widths;
  x.resize(static_cast<size_t>(k));
  widths.resize(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j)
    x[static_cast<size_t>(j)] = a.input<float>(j), widths[static_cast<size_t>(j)] = a.in_shape(j)[axis] * inner;
  launch_concat(x.data(), widths.data(), k, a.output<float>(), outer_of(a.node.shape, axis), sms(a), a.ctx.stream);
}
void slice(const KernelArgs& a) {
  const Shape& xs = a.in_shape(0);
  const int axis = a.node.attrs.axis < 0 ? a.node.attrs.axis + xs.rank() : a.node.attrs.axis;
  const int64_t inner = inner_of(xs, axis);
  launch_slice(a.input<float>(0), a.output<float>(), outer_of(xs, axis), xs[axis] * inner, a.node.attrs.begin * inner,
               a.node.attrs.size * inner, sms(a), a.ctx.stream);
}
void reverse(const KernelArgs& a) {
  const Shape& xs = a.in_shape(0);
  const int axis = a.node.attrs.axis < 0 ? a.node.attrs.axis + xs.rank() : a.node.attrs.axis;
  launch_reverse(a.in[0], a.out, static_cast<int>(dtype_size(a.out_dtype)), outer_of(xs, axis), xs[axis],
                 inner_of(xs, axis), sms(a), a.ctx.stream);
}

Image image_of(const Shape& s) { return {s[0], s[1], s[2], s[3]}; }
template <bool Pad>
void pad_or_crop(const KernelArgs& a) {
  const int64_t sign = Pad ? 1 : -1;
  launch_shifted(a.input<float>(0), image_of(a.in_shape(0)), a.output<float>(), image_of(a.node.shape),
                 sign * a.node.attrs.pad[0], sign * a.node.attrs.pad[2], sms(a), a.ctx.stream);
}
void upsample(const KernelArgs& a) {
  launch_upsample(a.input<float>(0), image_of(a.in_shape(0)), a.output<float>(), image_of(a.node.shape),
                  a.node.attrs.kernel[0], a.node.attrs.kernel[1], sms(a), a.ctx.stream);
}
void upsample_grad(const KernelArgs& a) {
  launch_upsample_grad(a.input<float>(0), image_of(a.in_shape(0)), a.output<float>(), image_of(a.node.shape),
                       a.node.attrs.kernel[0], a.node.attrs.kernel[1], sms(a), a.ctx.stream);
}
void affine(const KernelArgs& a) {
  launch_affine(a.input<float>(0), a.input<float>(1), a.output<float>(),
                backends::affine_layout(a.in_shape(0), a.node.attrs), sms(a), a.ctx.stream);
}
void affine_grad(const KernelArgs& a) {
  launch_affine_grad(a.input<float>(0), a.input<float>(1), a.output<float>(),
                     backends::affine_layout(a.in_shape(0), a.node.attrs), sms(a), a.ctx.stream);
}
void resize(const KernelArgs& a) {
  launch_resize(a.input<float>(0), a.output<float>(),
                backends::resize_layout(a.in_shape(0), a.node.shape, a.node.attrs.bilinear), sms(a), a.ctx.stream);
}
void resize_grad(const KernelArgs& a) {
  launch_resize_grad(a.input<float>(0), a.output<float>(),
                     backends::resize_layout(a.node.shape, a.in_shape(0), a.node.attrs.bilinear), sms(a), a.ctx.stream);
}

// BatchNormalization (batchnorm.cu): x (or dy, input 0 either way) viewed as (M, C), channels last; stats(2, C) =
// [mean; biased variance]; epsilon and momentum from the node's attrs, as on the CPU.
struct BnView {
  int64_t m, c;
};
BnView bn_view(const Shape& x) {
  const int64_t c = x[-1];
  return {x.numel() / (c ? c : 1), c};
}
// The per-channel sums' partials; synchronized (attrs.collective), then what is summed over the replicas.
size_t bn_workspace(const graph::Graph& g, int node) {
  const BnView v = bn_view(g[g[node].inputs[0]].shape);
  return static_cast<size_t>(bn_workspace_doubles(v.m, v.c)) * sizeof(double) +
         (g[node].attrs.collective ? static_cast<size_t>(bn_sync_floats(v.c)) * sizeof(float) : 0);
}
float* bn_sync(const KernelArgs& a, const BnView& v) {
  return reinterpret_cast<float*>(static_cast<double*>(a.workspace) + bn_workspace_doubles(v.m, v.c));
}
void bn_stats(const KernelArgs& a) {
  const BnView v = bn_view(a.in_shape(0));
  auto* ws = static_cast<double*>(a.workspace);
  graph::Collective* group = a.node.attrs.collective;
  if (!group) {
    launch_bn_stats(a.input<float>(0), a.output<float>(), v.m, v.c, ws, sms(a), a.ctx.stream);
    return;
  }
  // Synchronized: the global batch's mean and variance; the all-reduces are queued on the stream between the phases.
  float* sync = bn_sync(a, v);
  const int r = a.node.attrs.replica;
  const char* what = a.node.name.c_str();
  launch_bn_sync_local_sums(a.input<float>(0), v.m, v.c, ws, sync, &a.scalars->grad_scale, sms(a), a.ctx.stream);
  float* weight = sync + 2 * v.c + 2;  // 1, or 0 for a stand-in row (launchers.h)
  group->all_reduce_async(r, sync, sync, v.c + 2, weight, a.ctx.stream, what, a.node.attrs.begin);
  launch_bn_sync_centered_squares(a.input<float>(0), v.m, v.c, ws, sync, sms(a), a.ctx.stream);
  group->all_reduce_async(r, sync + v.c + 2, sync + v.c + 2, v.c, weight, a.ctx.stream, what, a.node.attrs.begin + 1);
  launch_bn_sync_stats(v.m, v.c, ws, sync, a.output<float>(), sms(a), a.ctx.stream);
}
void bn_apply(const KernelArgs& a) {  // (x, stats, gamma, beta)
  const BnView v = bn_view(a.in_shape(0));
  const float* stats = a.input<float>(1);
  launch_bn_normalize(a.input<float>(0), stats, stats + v.c, a.input<float>(2), a.input<float>(3), a.output<float>(),
                      v.m, v.c, a.node.attrs.epsilon, sms(a), a.ctx.stream);
}
void bn_inference(const KernelArgs& a) {  // (x, moving_mean, moving_variance, gamma, beta)
  const BnView v = bn_view(a.in_shape(0));
  launch_bn_normalize(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3), a.input<float>(4),
                      a.output<float>(), v.m, v.c, a.node.attrs.epsilon, sms(a), a.ctx.stream);
}
void bn_input_grad(const KernelArgs& a) {  // (dy, x, stats, gamma)
  const BnView v = bn_view(a.in_shape(0));
  auto* ws = static_cast<double*>(a.workspace);
  graph::Collective* group = a.node.attrs.collective;
  if (!group) {
    launch_bn_input_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3), a.output<float>(),
                         v.m, v.c, a.node.attrs.epsilon, ws, sms(a), a.ctx.stream);
    return;
  }
  // Synchronized: sum(dy) and sum(dy * xhat) over the global batch, weighted by the replicas' shares (the CPU
  // kernel's comment, backends/cpu/batchnorm.cpp, derives it).
  float* sync = bn_sync(a, v);
  const float* share = &a.scalars->grad_scale;
  launch_bn_sync_grad_sums(a.input<float>(0), a.input<float>(1), a.input<float>(2), v.m, v.c, a.node.attrs.epsilon, ws,
                           sync, sms(a), a.ctx.stream);
  group->all_reduce_async(a.node.attrs.replica, sync, sync, 2 * v.c, share, a.ctx.stream, a.node.name.c_str(),
                          a.node.attrs.begin + 2);
  launch_bn_sync_input_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3), sync, share,
                            a.output<float>(), v.m, v.c, a.node.attrs.epsilon, sms(a), a.ctx.stream);
}
void bn_gamma_grad(const KernelArgs& a) {  // (dy, x, stats)
  const BnView v = bn_view(a.in_shape(0));
  launch_bn_gamma_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.output<float>(), v.m, v.c,
                       a.node.attrs.epsilon, static_cast<double*>(a.workspace), sms(a), a.ctx.stream);
}
void bn_inference_grad(const KernelArgs& a) {  // (dy, moving_variance, gamma)
  const BnView v = bn_view(a.in_shape(0));
  launch_bn_inference_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.output<float>(), v.m, v.c,
                           a.node.attrs.epsilon, sms(a), a.ctx.stream);
}
void bn_inference_gamma_grad(const KernelArgs& a) {  // (dy, x, moving_mean, moving_variance)
  const BnView v = bn_view(a.in_shape(0));
  launch_bn_inference_gamma_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3),
                                 a.output<float>(), v.m, v.c, a.node.attrs.epsilon, static_cast<double*>(a.workspace),
                                 sms(a), a.ctx.stream);
}
void bn_update_moving(const KernelArgs& a) {  // (stats, moving_mean, moving_variance): the last two in place
  launch_bn_update_moving(a.input<float>(0), a.inout<float>(1), a.inout<float>(2), a.in_shape(1)[0],
                          a.node.attrs.momentum, sms(a), a.ctx.stream);
}

size_t rows_workspace(const graph::Graph& g, int node) {  // one double per batch row
  return static_cast<size_t>(loss_dims(g, g[node]).rows) * sizeof(double);
}

}  // namespace

size_t side_bias_grad_workspace(const graph::Graph& g, int node, size_t before) {
  const graph::Node& n = g[node];
  if (!n.attrs.side_output) return before;
  const int64_t c = n.shape.rank() ? n.shape[-1] : 1, rows = n.shape.numel() / (c ? c : 1);
  return side_offset(before) + static_cast<size_t>(bias_grad_chunks(rows) * c) * sizeof(double);
}

void launch_side_bias_grad(const KernelArgs& a, const float* y, size_t before) {
  const int64_t c = a.node.shape.rank() ? a.node.shape[-1] : 1, rows = a.node.shape.numel() / (c ? c : 1);
  auto* partials = reinterpret_cast<double*>(static_cast<std::byte*>(a.workspace) + side_offset(before));
  launch_bias_grad(y, static_cast<float*>(a.side_out), rows, c, partials, sms(a), a.ctx.stream);
}

void register_kernels() {
  using graph::register_kernel;
  constexpr auto cuda = DeviceKind::cuda;
  constexpr auto f32 = DType::f32;
  register_kernel(cuda, Op::Relu, f32, activation<Activation::relu>);
  register_kernel(cuda, Op::ReluGrad, f32, activation_grad_relu);
  graph::register_workspace(cuda, Op::ReluGrad, relu_grad_workspace);
  register_kernel(cuda, Op::Sigmoid, f32, activation<Activation::sigmoid>);
  register_kernel(cuda, Op::SigmoidGrad, f32, activation_grad<Activation::sigmoid>);
  register_kernel(cuda, Op::Tanh, f32, activation<Activation::tanh>);
  register_kernel(cuda, Op::TanhGrad, f32, activation_grad<Activation::tanh>);
  register_kernel(cuda, Op::Gelu, f32, activation<Activation::gelu>);
  register_kernel(cuda, Op::GeluGrad, f32, activation_grad<Activation::gelu>);
  register_kernel(cuda, Op::Elu, f32, activation<Activation::elu>);
  register_kernel(cuda, Op::EluGrad, f32, activation_grad<Activation::elu>);
  register_kernel(cuda, Op::LeakyRelu, f32, activation<Activation::leaky_relu>);
  register_kernel(cuda, Op::LeakyReluGrad, f32, activation_grad<Activation::leaky_relu>);
  for (Op op : {Op::SgdUpdate, Op::AdamUpdate, Op::RmspropUpdate, Op::MultiUpdate}) {
    register_kernel(cuda, op, f32, update);
    graph::register_workspace(cuda, op, update_workspace);
  }
  register_kernel(cuda, Op::AllReduce, f32, all_reduce);
  register_kernel(cuda, Op::AllReduceWait, f32, all_reduce_wait);
  register_kernel(cuda, Op::Fill, f32, fill);
  register_kernel(cuda, Op::Add, f32, add);
  register_kernel(cuda, Op::Mul, f32, mul);
  register_kernel(cuda, Op::Scale, f32, scale);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) register_kernel(cuda, Op::Reshape, t, reshape);  // bytes
  register_kernel(cuda, Op::BiasAdd, f32, bias_add);
  register_kernel(cuda, Op::BiasGrad, f32, bias_grad);
  graph::register_workspace(cuda, Op::BiasGrad, bias_grad_workspace);
  register_kernel(cuda, Op::AccumulateGrad, f32, accumulate_grad);
  register_kernel(cuda, Op::DropoutMask, f32, dropout_mask);
  register_kernel(cuda, Op::RandomUniform, f32, random_values<false>);
  register_kernel(cuda, Op::RandomNormal, f32, random_values<true>);
  for (int t = 0; t < kDTypeCount; ++t) register_kernel(cuda, Op::Reverse, static_cast<DType>(t), reverse);
  register_kernel(cuda, Op::Softmax, f32, softmax);
  register_kernel(cuda, Op::SoftmaxGrad, f32, softmax_grad);
  register_kernel(cuda, Op::LogSoftmax, f32, log_softmax);
  register_kernel(cuda, Op::SparseCceLoss, f32, sparse_cce);
  register_kernel(cuda, Op::SparseCceLossGrad, f32, sparse_cce_grad);
  register_kernel(cuda, Op::SparseCategoricalAccuracy, f32, sparse_accuracy);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) register_kernel(cuda, Op::StepControl, t, step_control);
  graph::register_workspace(cuda, Op::StepControl, step_control_workspace);
  register_kernel(cuda, Op::Concat, f32, concat);
  register_kernel(cuda, Op::Slice, f32, slice);
  register_kernel(cuda, Op::Pad2D, f32, pad_or_crop<true>);
  register_kernel(cuda, Op::Crop2D, f32, pad_or_crop<false>);
  register_kernel(cuda, Op::Upsample2D, f32, upsample);
  register_kernel(cuda, Op::Upsample2DGrad, f32, upsample_grad);
  register_kernel(cuda, Op::Resize, f32, resize);
  register_kernel(cuda, Op::ResizeGrad, f32, resize_grad);
  register_kernel(cuda, Op::AffineTransform, f32, affine);
  register_kernel(cuda, Op::AffineTransformGrad, f32, affine_grad);
  for (int f = 0; f < kDTypeCount; ++f)
    for (int t = 0; t < kDTypeCount; ++t)
      register_kernel(cuda, Op::Cast, graph::KernelSignature({static_cast<DType>(f)}, static_cast<DType>(t)), cast);
  for (Op op : {Op::MseLoss, Op::BceLoss, Op::BinaryAccuracy}) {
    register_kernel(cuda, op, f32, element_loss);
    graph::register_workspace(cuda, op, elements_workspace);
  }
  for (Op op : {Op::MseLossGrad, Op::BceLossGrad}) register_kernel(cuda, op, f32, element_loss_grad);
  register_kernel(cuda, Op::CceLoss, f32, cce);
  register_kernel(cuda, Op::CceLossGrad, f32, cce_grad);
  register_kernel(cuda, Op::CategoricalAccuracy, f32, categorical_accuracy);
  for (Op op : {Op::SparseCceLoss, Op::SparseCategoricalAccuracy, Op::CceLoss, Op::CategoricalAccuracy})
    graph::register_workspace(cuda, op, rows_workspace);
  register_kernel(cuda, Op::BnStats, f32, bn_stats);
  register_kernel(cuda, Op::BnApply, f32, bn_apply);
  register_kernel(cuda, Op::BnInputGrad, f32, bn_input_grad);
  register_kernel(cuda, Op::BnGammaGrad, f32, bn_gamma_grad);
  register_kernel(cuda, Op::BnInference, f32, bn_inference);
  register_kernel(cuda, Op::BnInferenceGrad, f32, bn_inference_grad);
  register_kernel(cuda, Op::BnInferenceGammaGrad, f32, bn_inference_gamma_grad);
  register_kernel(cuda, Op::BnUpdateMoving, f32, bn_update_moving);  // float32 state only: no 16-bit kernel
  register_kernel(cuda, Op::Constrain, f32, constrain);              // weights stay float32
  for (Op op : {Op::BnStats, Op::BnInputGrad, Op::BnGammaGrad, Op::BnInferenceGammaGrad})
    graph::register_workspace(cuda, op, bn_workspace);
  register_gemm_kernels();
  register_lstm_kernels();
  register_attention_kernels();
  register_conv_kernels();
  register_tensor_kernels();
  register_widened_kernels();
  register_native16_gemm_kernels();  // after the widened ones, which they fall back to
  register_native16_conv_kernels();
}

}  // namespace tk::cuda
#else
namespace tk::cuda {
void register_kernels() {}
}  // namespace tk::cuda
#endif
