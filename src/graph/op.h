// The closed set of primitive ops. Adding an op touches: this enum, the table in op_table.cpp (arity, shape
// rule, dtype rule, gradient rule), a kernel per backend in backends/<backend>/ (registered per device
// kind, op, input dtypes and output dtype), and a case in tests/test_op_gradients.cpp (the harness that
// checks every op on every backend and dtype). Forgetting the table entry fails the build (static_assert
// in op_table.cpp); forgetting a kernel or a test case fails tests/test_op_gradients.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "graph/collective.h"
#include "graph/tensor_fns.h"
#include "trainkit/core/dtype.h"
#include "trainkit/core/shape.h"

namespace tk::graph {

enum class Op : uint8_t {
  // Sources
  Input,     // a batch fed by the caller; lives in the arena for the whole program
  Variable,  // persistent storage owned outside the program (weights, optimizer slots)
  Fill,      // a constant tensor (attrs.value), e.g. the seed gradient 1.0 of a loss
  Cast,      // x -> attrs.dtype (float <-> float with round-to-nearest-even, float <-> integer)
  // Linear algebra and shape
  MatMul,    // (m,k)x(k,n) -> (m,n); attrs.trans_a / trans_b
  BiasAdd,   // x(..., n) + b(n)
  BiasGrad,  // sum of dy(..., n) over all but the last axis -> (n); with attrs.side_output no kernel of its own runs:
             // its input's kernel writes it (the fusion pass's, graph/fuse.h)
  // op(a) op(b) with an epilogue, made by the fusion pass (graph/fuse.h) from MatMul -> BiasAdd [-> Relu] and
  // MatMul -> ReluGrad: (a, b, bias(n)) -> a.b + bias, relu'd when attrs.epilogue is Relu; (a, b, y(m,n)) ->
  // a.b * (y > 0) when attrs.epilogue is ReluGrad (the gradient through a relu whose output is y).
  FusedMatMul,
  Add,      // a + b, equal shapes
  Mul,      // a * b, equal shapes
  Scale,    // x * attrs.scale + attrs.offset (Keras' Rescaling; fused into batch staging when it reads an Input)
  Reshape,  // same data, attrs.shape
  Concat,   // along attrs.axis (default -1: the last)
  Slice,    // [attrs.begin, attrs.begin + attrs.size) along attrs.axis (default -1: the last)
  // Activations and their gradients (grad ops take (dy, x) or (dy, y) as noted in op_table.cpp)
  Relu,
  ReluGrad,
  Sigmoid,
  SigmoidGrad,
  Tanh,
  TanhGrad,
  Gelu,
  GeluGrad,
  Elu,
  EluGrad,
  LeakyRelu,
  LeakyReluGrad,
  Softmax,
  SoftmaxGrad,
  DropoutMask,  // 0 or 1/(1-rate) per element (per sample and channel if attrs.spatial); random per (seed, step, index)
  // Images, NHWC (channels_last, as Keras). Windows: attrs.kernel, stride, dilation, pad (top, bottom, left, right)
  Conv2D,            // x (N,H,W,C), w (KH,KW,C,F) -> (N,OH,OW,F)
  Conv2DGradInput,   // (dy, w) -> attrs.shape (x)
  Conv2DGradFilter,  // (x, dy) -> attrs.shape (w)
  FusedConv2D,       // (x, w, bias(F)) -> conv + bias, relu'd when attrs.epilogue is Relu (the fusion pass's)
  MaxPool2D,
  MaxPool2DGrad,  // grad: (dy, x) -> x; padding never wins the max
  AvgPool2D,
  AvgPool2DGrad,  // grad: (dy) -> attrs.shape; padding excluded from the average (as TF)
  Pad2D,
  Crop2D,  // zero padding by attrs.pad / its inverse
  Upsample2D,
  Upsample2DGrad,  // nearest, factors attrs.kernel; grad: (dy) -> sum over each block
  // Batch normalization over all axes but the last (Keras 3: biased batch variance)
  BnStats,               // x -> (2, C): mean; variance. With attrs.collective (synchronized, as replica attrs.replica,
                         // collectives attrs.begin and begin + 1): the global batch's, summed over the replicas
  BnApply,               // (x, stats, gamma, beta) -> gamma * (x - mean) / sqrt(var + eps) + beta
  BnInputGrad,           // (dy, x, stats, gamma) -> dx, through the batch statistics too; with attrs.collective
                         // through the global batch's (collective attrs.begin + 2)
  BnGammaGrad,           // (dy, x, stats) -> (C)
  BnInference,           // (x, moving_mean, moving_variance, gamma, beta) -> y
  BnInferenceGrad,       // (dy, moving_variance, gamma) -> dx
  BnInferenceGammaGrad,  // (dy, x, moving_mean, moving_variance) -> (C)
  BnUpdateMoving,        // in place on (stats, moving_mean, moving_variance), attrs.momentum; no output
  // Losses: (pred, target) -> scalar mean over the batch; the grad op takes (pred, target, dy)
  MseLoss,
  MseLossGrad,
  BceLoss,
  BceLossGrad,
  CceLoss,
  CceLossGrad,
  SparseCceLoss,
  SparseCceLossGrad,
  // Metrics: (pred, target) -> scalar fraction correct in this batch
  BinaryAccuracy,
  CategoricalAccuracy,
  SparseCategoricalAccuracy,
  // Optimizer updates: in place on (param, grad, slots...), no output
  // The slots each takes are those its config uses (update_slot_mask below), in this order:
  SgdUpdate,       // (param, grad[, momentum: momentum != 0])
  AdamUpdate,      // (param, grad, m, v); AdamW through weight_decay
  RmspropUpdate,   // (param, grad, velocity[, momentum: momentum > 0][, average_gradient: centered])
  StepControl,     // a step's gradients [, loss-scale state] -> (2): [0] 1 when all are finite (or the check is
                   // off) else 0, [1] the factor every gradient is multiplied by: 1 / loss scale (1 without loss
                   // scaling) times the global-norm clip factor min(1, global_clipnorm / ||unscaled||) (1 when off);
                   // attrs.update. With loss scaling it also updates the state in place (UpdateConfig).
  AccumulateGrad,  // in place: acc += grad * StepScalars::grad_scale (micro-batching); (acc, grad), no output
  MultiUpdate,     // several variables' updates in one kernel (graph/fuse.h groups them by readiness): inputs
                   // (params 0..K-1, grads K..2K-1, S slots per variable, [StepControl]), K = attrs.size, S the
  // rule's update_slot_count, the rule in attrs.epilogue (SgdUpdate, AdamUpdate or RmspropUpdate); in place, no output
  AllReduce,      // data parallel: (grad) -> sum over the replicas of grad * StepScalars::grad_scale (each replica's
                  // share of the global batch), through attrs.collective (graph/collective.h) as replica
                  // attrs.replica, collective number attrs.begin; without a collective grad * grad_scale.
                  // attrs.zero_grad: clears the inputs afterwards (micro-batching's accumulators). With k > 1
                  // inputs a bucket (graph/bucket.h): the output is flat, input i's sum at bucket_offsets()[i],
                  // and the gradients are read back through View nodes
  AllReduceWait,  // (an AllReduce with attrs.overlap) -> the same memory, once the reduction it started is done
                  // (Collective::finish_all_reduce); what the bucket's readers read. Placed like a View.
  View,           // (x) -> attrs.shape: elements [attrs.begin, attrs.begin + size) of x, the same memory (no copy,
                  // no kernel: the planner places it inside x, graph/schedule.h); a gradient inside its bucket
  // The general tensor vocabulary layers compose (graph/tensor_ops.h builds them and their gradients): NumPy
  // broadcasting, any axis, rank <= kMaxRank. The ops above stay as the fast paths of common layers.
  Unary,        // f(x): attrs.unary (graph/tensor_fns.h) with attrs.fn_param
  UnaryGrad,    // (dy, x) -> dy * f'(x), f as attrs.unary
  Binary,       // f(a, b), broadcast: attrs.binary (arithmetic); the operands' dtype
  Compare,      // (a, b) -> bool, broadcast: attrs.binary (a comparison)
  Where,        // (cond bool, a, b) -> cond ? a : b, all three broadcast
  Reduce,       // attrs.reduce over the axes in attrs.axes (bit i: axis i), kept as 1s with attrs.keepdims
  ArgReduce,    // int32 index of the first max (attrs.reduce max) or min along attrs.axis [kept with attrs.keepdims]
  BroadcastTo,  // x -> attrs.shape (NumPy rules)
  Transpose,    // axis i of y is axis attrs.perm[i] of x
  Pad,          // attrs.value around x: attrs.pad_before[i] / pad_after[i] elements on axis i
  BatchMatMul,  // (..., m, k) x (..., k, n) -> (..., m, n); batch axes broadcast; attrs.trans_a / trans_b
  Gather,       // (params, indices int32/int64) along attrs.axis -> params[:axis] + indices + params[axis+1:]; an
                // index outside [0, params[axis]) is an InvalidArgument naming it (checked in the kernel)
  GatherGrad,   // (dy, indices) -> attrs.shape (the params'): dy's slices summed into the slices the indices name, in
                // index order (deterministic: no atomics)
  OneHot,       // (indices int32/int64) -> indices' shape + (attrs.depth) in attrs.dtype: 1 at the index, 0 elsewhere
                // (a row of zeros for an index outside [0, depth), as TensorFlow)
  // Optimizers written in the general ops (nn/optimizer_rule.h):
  StepValue,  // () -> float32 scalar: this step's learning rate (attrs.step_value 0) or the optimizer's update
              // count + 1 (1: Keras' local_step), read from StepScalars on the device
  Assign,     // in place: (variable, value) -> the variable's storage holds value; no output
  // LayerNormalization over the last axis, fused (nn/layers/layer_normalization.cpp takes it for the common case and
  // its composite of the general ops otherwise): x (..., n), attrs.epsilon
  LayerNormStats,      // x -> (rows, 2): [mean, 1 / sqrt(biased variance + epsilon)] per row
  LayerNormApply,      // (x, stats, gamma(n), beta(n)) -> y, in Keras' order of operations
  LayerNormInputGrad,  // (dy, x, stats, gamma) -> dx, through the statistics
  LayerNormGammaGrad,  // (dy, x, stats) -> (2, n): the sums over rows of dy * xhat (gamma's) and of dy (beta's)
  // Keras' LSTM cell (sigmoid gates, tanh activation) over a whole sequence, fused (nn/layers/recurrent.cpp takes it
  // for the common case, its per-step composite otherwise; graph/lstm_rules.h has the layout):
  LstmSequence,      // (proj (T * N, 4u), recurrent_kernel (u, 4u), h0 (N, u), c0 (N, u)) -> (6T + 2, N, u): the
                     // h states, the c states and the gate activations; attrs.reverse: steps run from t = T - 1
  LstmSequenceGrad,  // (dy, y, recurrent_kernel) -> (T + 1, N, 4u): d proj, then [dh0, dc0, 0, 0]
  // Scaled dot-product attention, fused (flash-attention style: the (T, S) scores never exist beyond a tile;
  // nn/layers/multi_head_attention.cpp takes it in training programs, graph/attention_rules.h has the layout):
  Attention,      // (q (N*T, H*D), k (N*S, H*D), v (N*S, H*Dv) [, mask (N, T, S) 0/1]) -> o (N*T, H*Dv); attrs.heads,
                  // .batch, .causal, .score_scale
  AttentionGrad,  // (do, q, k, v, o [, mask]) -> flat [dq | dk | dv], scores recomputed blockwise
  // LayerNormApply's whole gradient in one sweep over dy and x (the rule's choice when dx and a parameter's gradient
  // are both needed): (dy, x, stats, gamma) -> (rows + 2, n): dx, then LayerNormGammaGrad's two rows
  LayerNormGrad,
  // log(softmax(x)) over the last axis in one op (graph/tensor_ops.h's log_softmax for that axis), TensorFlow's order:
  // (x - max) - log(sum(exp(x - max))); a row holding a NaN, or whose max is +-inf, is NaN throughout
  LogSoftmax,
  // Random values for the training-only noise and augmentation layers (GaussianNoise, GaussianDropout, RandomFlip,
  // RandomContrast): () -> attrs.shape, float32, random per (attrs.seed, step, global index) as DropoutMask (rows
  // keyed by the global sample, so data-parallel replicas draw what one device would). No gradient.
  RandomUniform,  // uniform in [0, 1)
  RandomNormal,   // standard normal
  Reverse,        // x with the order along attrs.axis reversed (NumPy's flip); any dtype; its gradient reverses dy
  // Keras' weight constraints, applied after the optimizer's update (nn/compiler/programs.cpp): in place, (variable
  // f32) -> no output; attrs.constraint names the rule (backends/math/constraints.h), over the axes in attrs.axes. The
  // schedule runs it after every other in-place writer of the variable (its update).
  Constrain,
  // Keras' image resize (keras.ops.image.resize, antialias=False; backends/math/resize.h) on NHWC float images:
  Resize,      // x (N, H, W, C) -> attrs.shape (N, H', W', C): attrs.bilinear, else nearest; half-pixel centers
  ResizeGrad,  // dy (N, H', W', C) -> attrs.shape (x's): every output pixel's gradient back to the pixels it sampled
  // Keras' image affine transform (keras.ops.image.affine_transform; backends/math/affine.h), behind RandomTranslation,
  // RandomRotation and RandomZoom: (images (N, H, W, C), transforms (N, 8) in the images' dtype) -> (N, H, W, C);
  // attrs.bilinear (else nearest), attrs.fill_mode, attrs.value the constant fill. Differentiable in the images.
  AffineTransform,
  AffineTransformGrad,  // (dy, transforms) -> d images: each output pixel's gradient back to the pixels it read
  kCount
};
inline constexpr int kOpCount = static_cast<int>(Op::kCount);

// Hyperparameters of an update op, owned by the optimizer. The per-step ones (learning_rate, iterations)
// reach kernels through the device's StepScalars (graph/kernel.h), filled from here before every run, so a
// learning-rate schedule takes effect without recompiling; the rest are constant for a compiled program.
struct UpdateConfig {
  float learning_rate = 0.001f;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-7f;  // Adam
  float momentum = 0.0f;                                  // SGD, RMSprop
  bool nesterov = false;                                  // SGD
  float rho = 0.9f;                                       // RMSprop
  bool centered = false;                                  // RMSprop
  float weight_decay = 0.0f;                              // decoupled (AdamW), any optimizer
  float clipnorm = 0.0f;                                  // 0 = off; per variable, as Keras
  float clipvalue = 0.0f;                                 // 0 = off
  float global_clipnorm = 0.0f;                           // 0 = off; over all of a step's gradients, as Keras
  bool skip_nonfinite = false;                            // skip the whole step when a gradient is not finite
  // Dynamic loss scaling (Keras' LossScaleOptimizer), on when initial_scale > 0: the loss is multiplied by the
  // current scale before differentiating; StepControl then takes the (3) float32 state [scale, finite steps since
  // the last change, skipped steps] as its last input, unscales, skips the step and halves the scale when a
  // gradient is not finite, and doubles it after growth_steps finite steps (in place on the state).
  float loss_scale_initial = 0.0f;
  int64_t loss_scale_growth_steps = 2000;
  int64_t iterations = 0;        // updates applied so far (Keras' optimizer.iterations)
  Op update_op = Op::SgdUpdate;  // the optimizer's update rule (set by the optimizer)
};

// The slots a fused update rule reads and writes under config `c`: bit j set = the rule's slot j (the op's comment
// above) is an input. Exactly the variables Keras makes for these hyperparameters (nn::Slot::in_keras, checked against
// this when an optimizer is made), so a slot the math never touches takes no memory: SGD without momentum holds none,
// RMSprop without momentum and not centered only the velocity. -1 for an op that is not a fused update rule.
constexpr int update_slot_mask(Op rule, const UpdateConfig& c) {
  switch (rule) {
    case Op::SgdUpdate:
      return c.momentum != 0.0f ? 1 : 0;
    case Op::AdamUpdate:
      return 3;
    case Op::RmspropUpdate:
      return 1 | (c.momentum > 0.0f ? 2 : 0) | (c.centered ? 4 : 0);
    default:
      return -1;
  }
}
// The number of slot inputs per variable (the set bits of update_slot_mask), -1 for an op that is not a rule.
constexpr int update_slot_count(Op rule, const UpdateConfig& c) {
  const int mask = update_slot_mask(rule, c);
  return mask < 0 ? -1 : (mask & 1) + ((mask >> 1) & 1) + ((mask >> 2) & 1);
}

// One meaning per field: an op that needs a number of another kind gets a field of its own (a slope read as a dropout
// rate, or a factor read as a constant, by a copied Attrs is a silent bug; the ONNX writer and the fusion pass read
// fields by name).
struct Attrs {
  bool trans_a = false, trans_b = false;  // MatMul
  bool from_logits = false;               // losses
  float alpha = 0.0f;                     // Elu, EluGrad: Keras' alpha; LeakyRelu, LeakyReluGrad: the negative slope
  float rate = 0.0f;                      // DropoutMask: the fraction of elements dropped
  float scale = 1.0f;                     // Scale: the factor
  float offset = 0.0f;                    // Scale: added after the factor
  float value = 0.0f;                     // Fill, Pad: the constant; AffineTransform(Grad): the fill value
  uint64_t seed = 0;                      // DropoutMask, RandomUniform, RandomNormal
  int64_t begin = 0, size = 0;            // Slice; MultiUpdate: size = the number of variables
  Shape shape;                            // Reshape target, Fill shape; Resize output, ResizeGrad input
  DType dtype = DType::f32;               // Input, Variable, Fill, DropoutMask: the value's; Cast: the target
  void* external = nullptr;               // Variable: the bound storage (in the variable's dtype)
  UpdateConfig* update = nullptr;         // update ops
  Collective* collective = nullptr;       // AllReduce, synchronized BnStats/BnInputGrad: the replicas' group
  int replica = 0;                        // AllReduce: this program's replica
  int64_t kernel[2] = {1, 1};             // window (KH, KW) of pooling; factors of Upsample2D
  int64_t stride[2] = {1, 1};
  int64_t dilation[2] = {1, 1};
  int64_t pad[4] = {0, 0, 0, 0};  // top, bottom, left, right
  // Conv2D, FusedConv2D and their gradients: channel groups (Keras' groups). The kernel is (KH, KW, C / groups, F);
  // output channel o reads input channels [g * C/groups, (g + 1) * C/groups) with g = o / (F / groups).
  // DepthwiseConv2D is groups = C, its (KH, KW, C, M) kernel viewed as (KH, KW, 1, C * M) with no copy.
  int64_t groups = 1;
  bool spatial = false;     // DropoutMask: one draw per (sample, channel)
  bool zero_grad = false;   // update ops: clear the gradient input after applying it
  bool gated = false;       // update ops: the last input is the step's StepControl
  bool split_ties = false;  // MaxPool2DGrad: share dy among tied maxima (GlobalMaxPooling2D)
  // The fusion pass's bias gradient (graph/fuse.h). On FusedMatMul (ReluGrad epilogue), MaxPool2DGrad and ReluGrad:
  // the kernel also writes the column sums of its output (the sum over all but the last axis) to
  // KernelArgs::side_out, the storage of the BiasGrad reading it. On that BiasGrad: no kernel runs for it.
  bool side_output = false;
  bool overlap = false;  // AllReduce: start the reduction and return (Collective::start_all_reduce); the
                         // AllReduceWait reading it finishes it, so work scheduled between the two overlaps it
  float momentum = 0.99f, epsilon = 1e-3f;  // batch normalization; LayerNorm* (epsilon)
  // The general tensor ops (graph/tensor_fns.h).
  UnaryFn unary = UnaryFn::kCount;     // Unary, UnaryGrad: the function
  float fn_param[2] = {0.0f, 0.0f};    // Unary, UnaryGrad: the function's parameters (tensor_fns.h says which)
  BinaryFn binary = BinaryFn::kCount;  // Binary, Compare: the function
  ReduceFn reduce = ReduceFn::kCount;  // Reduce, ArgReduce: the function
  uint32_t axes = 0;                   // Reduce: bit i set = axis i is reduced; Constrain: the norm axes
  bool keepdims = false;               // Reduce, ArgReduce: reduced axes stay as 1s
  int axis = -1;               // Concat, Slice, Gather, GatherGrad, ArgReduce, Reverse; negative counts from the end
  int8_t perm[kMaxRank] = {};  // Transpose
  int64_t pad_before[kMaxRank] = {};  // Pad
  int64_t pad_after[kMaxRank] = {};   // Pad
  int64_t depth = 0;                  // OneHot: the number of classes
  uint8_t step_value = 0;             // StepValue: 0 the learning rate, 1 the update count + 1
  bool reverse = false;               // LstmSequence, LstmSequenceGrad: the steps run backwards in time
  Op epilogue = Op::kCount;  // FusedMatMul: Relu, ReluGrad or kCount (the bias alone); FusedConv2D: Relu or kCount;
                             // MaxPool2DGrad: ReluGrad (dx zeroed where the pool's input x <= 0) or kCount;
                             // MultiUpdate: its rule
  // Attention, AttentionGrad (graph/attention_rules.h):
  int64_t heads = 0;         // the number of heads: q's columns are heads * key_dim
  int64_t batch = 0;         // N: q's rows are N * T, k's and v's N * S
  bool causal = false;       // query step i sees key step j only when j <= i
  float score_scale = 1.0f;  // the scores' factor (1 / sqrt(key_dim) for MultiHeadAttention)
  // Constrain: Keras' constraint class (0 NonNeg, 1 MaxNorm, 2 UnitNorm, 3 MinMaxNorm: graph::ConstraintKind) and its
  // norm bounds and rate (MaxNorm: norm_max; MinMaxNorm: all three); the norms run over attrs.axes.
  uint8_t constraint = 0;
  bool bilinear = false;  // Resize, ResizeGrad, AffineTransform(Grad): bilinear interpolation (else nearest)
  uint8_t fill_mode = 0;  // AffineTransform(Grad): math::FillMode (constant, nearest, wrap, mirror, reflect)
  float norm_min = 0.0f, norm_max = 0.0f, norm_rate = 1.0f;
};

// Sources: values no kernel computes, ready before the program's first kernel (the schedule, buckets and
// rematerialization treat them alike).
constexpr bool is_source(Op op) { return op == Op::Input || op == Op::Variable || op == Op::Fill; }

// Op families the shape, dtype and kernel-signature rules share.
constexpr bool is_sparse_target_op(Op op) {  // class-index targets (int32) instead of one-hot ones
  return op == Op::SparseCceLoss || op == Op::SparseCceLossGrad || op == Op::SparseCategoricalAccuracy;
}
constexpr bool is_loss_grad_op(Op op) {  // (pred, target, dy) -> d pred
  return op == Op::MseLossGrad || op == Op::BceLossGrad || op == Op::CceLossGrad || op == Op::SparseCceLossGrad;
}

struct Graph;
struct OpBuilder;
using GradBuilder = OpBuilder;

// Validates the inputs and returns the output shape; throws InvalidArgument naming op and shapes.
using ShapeFn = Shape (*)(const Graph& g, int node);
// Validates the input dtypes and returns the output dtype (of the in-place operand for ops without output);
// throws InvalidArgument naming op, node and dtypes. Never promotes: mixing dtypes needs a Cast.
using DTypeFn = DType (*)(const Graph& g, int node);
// Emits ops computing the gradient of each input from dy (the gradient of the node's output).
// Writes a value id into dx[i] for every input with need[i]; leaves -1 where there is none.
using GradFn = void (*)(GradBuilder& b, int node, int dy, const bool* need, int* dx);
// Scratch bytes a kernel needs while it runs. Not an op property: the backend that runs the op says
// (graph/backend.h), so the op table knows nothing of im2col or oneDNN.
using WorkspaceFn = size_t (*)(const Graph& g, int node);

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;        // number of inputs; -1 = variadic (at least one, all of one dtype)
  bool has_output;  // update ops have none
  ShapeFn shape;
  DTypeFn dtype;
  GradFn grad;  // nullptr: not differentiable (gradient ops, metrics, sources)
};

const OpInfo& op_info(Op op);
inline std::string_view op_name(Op op) { return op_info(op).name; }

}  // namespace tk::graph
