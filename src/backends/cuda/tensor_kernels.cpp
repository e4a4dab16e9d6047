// Registers the general tensor ops' CUDA kernels (tensor_launchers.h): the layouts (math::Strided) are built on the
// host from the node's shapes, as the CPU kernels build them (backends/strided.h); BatchMatMul is strided-batched
// cuBLASLt GEMMs (gemm_cublaslt.h, backends/batch_layout.h). Float ops register float32 (16-bit through widen.cpp)
// and, where integers make sense (Binary, Compare, Reduce, ArgReduce), int32/int64 (integer_launchers.h); ops that
// move values register every dtype.
#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>

#include "backends/batch_layout.h"
#include "backends/cuda/check.h"
#include "backends/cuda/device_errors_cuda.h"
#include "backends/cuda/gemm_cublaslt.h"
#include "backends/cuda/integer_launchers.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/tensor_launchers.h"
#include "backends/device_errors.h"
#include "backends/strided.h"
#include "backends/widen.h"
#include "graph/kernel.h"
#include "trainkit/core/convert.h"

namespace tk::cuda {

int sm_count(int index);  // cuda_kernels.cpp

namespace {
using graph::KernelArgs;
using graph::KernelSignature;
using graph::Op;

int sms(const KernelArgs& a) { return sm_count(a.ctx.device.index); }
int bytes_of(DType t) { return static_cast<int>(dtype_size(t)); }
int axis_of(const KernelArgs& a, int rank) {
  return a.node.attrs.axis < 0 ? a.node.attrs.axis + rank : a.node.attrs.axis;
}

void unary(const KernelArgs& a) {
  launch_unary(a.node.attrs.unary, a.input<float>(0), a.output<float>(), a.node.shape.numel(), a.node.attrs.fn_param[0],
               a.node.attrs.fn_param[1], sms(a), a.ctx.stream);
}
void unary_grad(const KernelArgs& a) {
  launch_unary_grad(a.node.attrs.unary, a.input<float>(0), a.input<float>(1), a.output<float>(), a.node.shape.numel(),
                    a.node.attrs.fn_param[0], a.node.attrs.fn_param[1], sms(a), a.ctx.stream);
}
void binary(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  launch_binary(a.node.attrs.binary, a.input<float>(0), a.input<float>(1), a.output<float>(), s, a.node.shape.numel(),
                sms(a), a.ctx.stream);
}
void compare(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  launch_compare(a.node.attrs.binary, a.input<float>(0), a.input<float>(1), a.output<bool>(), s, a.node.shape.numel(),
                 sms(a), a.ctx.stream);
}
void where(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1), &a.in_shape(2)});
  launch_where(a.input<bool>(0), a.in[1], a.in[2], a.out, bytes_of(a.out_dtype), s, a.node.shape.numel(), sms(a),
               a.ctx.stream);
}
void broadcast_to(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0)});
  launch_gather_strided(a.in[0], a.out, bytes_of(a.out_dtype), s, a.node.shape.numel(), sms(a), a.ctx.stream);
}
void transpose(const KernelArgs& a) {
  const math::Strided s = backends::transpose_layout(a.in_shape(0), a.node.attrs.perm);
  launch_gather_strided(a.in[0], a.out, bytes_of(a.out_dtype), s, a.node.shape.numel(), sms(a), a.ctx.stream);
}
void pad(const KernelArgs& a) {
  PadGeo g;
  g.rank = a.node.shape.rank();
  for (int d = 0; d < g.rank; ++d)
    g.ydims[d] = a.node.shape[d], g.xdims[d] = a.in_shape(0)[d], g.before[d] = a.node.attrs.pad_before[d];
  uint64_t fill = 0;
  convert_elements(&a.node.attrs.value, DType::f32, &fill, a.out_dtype, 1);  // the constant's bytes in the dtype
  launch_pad(a.in[0], a.out, bytes_of(a.out_dtype), g, fill, a.node.shape.numel(), sms(a), a.ctx.stream);
}

// x as kept axes (the output's) x reduced axes, each a strided layout of x.
struct ReduceLayout {
  math::Strided kept, reduced;
  int64_t outputs = 1, count = 1;
};
ReduceLayout reduce_layout(const KernelArgs& a) {
  const Shape& x = a.in_shape(0);
  ReduceLayout l;
  int64_t stride = 1;
  int64_t xstride[graph::kMaxRank] = {};
  for (int d = x.rank() - 1; d >= 0; --d) xstride[d] = stride, stride *= x[d];
  for (int d = 0; d < x.rank(); ++d) {
    const bool r = a.node.attrs.axes & (1u << d);
    math::Strided& s = r ? l.reduced : l.kept;
    s.dims[s.rank] = x[d];
    s.stride[0][s.rank++] = xstride[d];
    (r ? l.count : l.outputs) *= x[d];
  }
  for (math::Strided* s : {&l.kept, &l.reduced}) {
    if (s->rank == 0) s->dims[s->rank++] = 1;
    backends::merge_axes(*s, 1);
  }
  if (l.count == 0) throw Unsupported("Reduce '" + a.node.name + "' over an empty axis on CUDA");
  return l;
}

void reduce(const KernelArgs& a) {
  const ReduceLayout l = reduce_layout(a);
  const math::Strided &kept = l.kept, &reduced = l.reduced;
  const int64_t outputs = l.outputs, count = l.count;
  const bool contiguous = reduced.rank == 1 && reduced.stride[0][0] == 1;
  const int group = reduce_group_threads(outputs, count, contiguous, sms(a));
  if (group > 1)
    launch_reduce_groups(a.node.attrs.reduce, group, a.input<float>(0), a.output<float>(), kept, reduced, outputs,
                         count, sms(a), a.ctx.stream);
  else
    launch_reduce(a.node.attrs.reduce, a.input<float>(0), a.output<float>(), kept, reduced, outputs, count, sms(a),
                  a.ctx.stream);
}
// A tensor of shape s as (outer, rows = s[axis], inner); count: Gather's indices.
struct Around {
  int64_t outer = 1, rows = 1, inner = 1, count = 1;
};
Around around(const Shape& s, int axis, int64_t count = 1) {
  Around g;
  for (int d = 0; d < axis; ++d) g.outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) g.inner *= s[d];
  g.rows = s[axis];
  g.count = count;
  return g;
}

void arg_reduce(const KernelArgs& a) {
  const Around g = around(a.in_shape(0), axis_of(a, a.in_shape(0).rank()));
  const bool max = a.node.attrs.reduce == graph::ReduceFn::max;
  const int group = reduce_group_threads(g.outer * g.inner, g.rows, g.inner == 1, sms(a));
  if (group > 1)
    launch_arg_reduce_groups(max, group, a.input<float>(0), a.output<int32_t>(), g.outer, g.rows, g.inner, sms(a),
                             a.ctx.stream);
  else
    launch_arg_reduce(max, a.input<float>(0), a.output<int32_t>(), g.outer, g.rows, g.inner, sms(a), a.ctx.stream);
}

// int32/int64 (integer_launchers.h): a divisor of 0 or a negative exponent is checked on the device first and raised
// at the next synchronization as the CPU kernel's InvalidArgument.
void integer_binary(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  const graph::BinaryFn f = a.node.attrs.binary;
  if (a.node.shape.numel() > 0 &&
      (f == graph::BinaryFn::floor_divide || f == graph::BinaryFn::mod || f == graph::BinaryFn::power))
    launch_check_integer_operand(f, a.in[1], bytes_of(a.out_dtype), a.in_shape(1).numel(),
                                 device_error_record(a.ctx.device.index),
                                 backends::integer_operand_site(a.node, a.in_shape(1)), a.ctx.stream);
  launch_integer_binary(f, a.in[0], a.in[1], a.out, bytes_of(a.out_dtype), s, a.node.shape.numel(), sms(a),
                        a.ctx.stream);
}
void integer_compare(const KernelArgs& a) {
  const math::Strided s = backends::broadcast_layout(a.node.shape, {&a.in_shape(0), &a.in_shape(1)});
  launch_integer_compare(a.node.attrs.binary, a.in[0], a.in[1], a.output<bool>(), bytes_of(a.in_dtypes[0]), s,
                         a.node.shape.numel(), sms(a), a.ctx.stream);
}
void integer_reduce(const KernelArgs& a) {
  const ReduceLayout l = reduce_layout(a);
  launch_integer_reduce(a.node.attrs.reduce, a.in[0], a.out, bytes_of(a.out_dtype), l.kept, l.reduced, l.outputs,
                        l.count, sms(a), a.ctx.stream);
}
void integer_arg_reduce(const KernelArgs& a) {
  const Around g = around(a.in_shape(0), axis_of(a, a.in_shape(0).rank()));
  launch_integer_arg_reduce(a.node.attrs.reduce == graph::ReduceFn::max, a.in[0], bytes_of(a.in_dtypes[0]),
                            a.output<int32_t>(), g.outer, g.rows, g.inner, sms(a), a.ctx.stream);
}

// Indices outside the table: launch_check_indices records the first, raised as the CPU kernel's InvalidArgument at the
// next synchronization (device_errors_cuda.h); the gather itself never reads outside the table.
void check_indices(const KernelArgs& a, const Around& g) {
  launch_check_indices(a.in[1], bytes_of(a.in_dtypes[1]), g.count, g.rows, device_error_record(a.ctx.device.index),
                       backends::gather_site(a.node, a.in_shape(1)), a.ctx.stream);
}
void gather(const KernelArgs& a) {
  const Around g = around(a.in_shape(0), axis_of(a, a.in_shape(0).rank()), a.in_shape(1).numel());
  check_indices(a, g);
  launch_gather(a.in[0], a.in[1], bytes_of(a.in_dtypes[1]), a.out, bytes_of(a.out_dtype), is_floating(a.out_dtype),
                g.outer, g.rows, g.inner, g.count, sms(a), a.ctx.stream);
}
void gather_grad(const KernelArgs& a) {
  const Around g = around(a.node.shape, axis_of(a, a.node.shape.rank()), a.in_shape(1).numel());
  check_indices(a, g);
  launch_gather_grad(a.input<float>(0), a.in[1], bytes_of(a.in_dtypes[1]), a.output<float>(), g.outer, g.rows, g.inner,
                     g.count, sms(a), a.ctx.stream);
}
void one_hot(const KernelArgs& a) {
  launch_one_hot(a.in[0], bytes_of(a.in_dtypes[0]), a.output<float>(), a.in_shape(0).numel(), a.node.attrs.depth,
                 sms(a), a.ctx.stream);
}

// One strided-batched cuBLASLt GEMM per leading batch index (backends/batch_layout.h: usually one call for the whole
// batch; broadcast operands stride 0); where cuBLASLt offers no algorithm for a batch, one GEMM per matrix.
size_t batch_matmul_workspace(const graph::Graph&, int) { return gemm_workspace_bytes(); }
void batch_matmul(const KernelArgs& a) {
  const cpu::GemmShape s = backends::batch_gemm_shape(a.g, a.node);
  const backends::GemmBatches bt = backends::gemm_batches(a.in_shape(0), a.in_shape(1), a.node.shape, s);
  const float* x = a.input<float>(0);
  const float* w = a.input<float>(1);
  float* y = a.output<float>();
  const GemmBatch batch{bt.count, bt.stride[0], bt.stride[1], bt.stride[2]};
  for (int64_t o = 0; o < bt.calls; ++o) {
    const float* xo = x + bt.offset(0, o);
    const float* wo = w + bt.offset(1, o);
    float* yo = y + bt.offset(2, o);
    if (bt.count > 1 &&
        gemm_strided_batched(s, batch, xo, wo, yo, a.workspace, a.ctx.device.index, a.ctx.stream, a.node))
      continue;
    for (int64_t j = 0; j < bt.count; ++j)
      gemm(s, xo + j * bt.stride[0], wo + j * bt.stride[1], nullptr, yo + j * bt.stride[2], 0.0f, a.workspace,
           a.ctx.device.index, a.ctx.stream, a.node);
  }
}

int64_t ln_rows(const Shape& x) { return x.numel() / x[-1]; }
void ln_stats(const KernelArgs& a) {
  const Shape& x = a.in_shape(0);
  launch_layer_norm_stats(a.input<float>(0), a.output<float>(), ln_rows(x), x[-1], a.node.attrs.epsilon, sms(a),
                          a.ctx.stream);
}
void ln_apply(const KernelArgs& a) {
  const Shape& x = a.in_shape(0);
  launch_layer_norm_apply(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3), a.output<float>(),
                          ln_rows(x), x[-1], sms(a), a.ctx.stream);
}
void ln_input_grad(const KernelArgs& a) {
  const Shape& x = a.in_shape(1);
  launch_layer_norm_input_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3),
                               a.output<float>(), ln_rows(x), x[-1], sms(a), a.ctx.stream);
}
void ln_gamma_grad(const KernelArgs& a) {
  const Shape& x = a.in_shape(1);
  launch_layer_norm_gamma_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.output<float>(), ln_rows(x),
                               x[-1], sms(a), a.ctx.stream);
}
// LayerNormGrad's (rows + 2, n): the input gradient's and the parameter sums' kernels, one after the other on the
// stream, each writing its part (the CPU computes both in one sweep; the math is the same).
void ln_grad(const KernelArgs& a) {
  const Shape& x = a.in_shape(1);
  const int64_t rows = ln_rows(x), n = x[-1];
  float* out = a.output<float>();
  launch_layer_norm_input_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3), out, rows, n,
                               sms(a), a.ctx.stream);
  launch_layer_norm_gamma_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2), out + rows * n, rows, n, sms(a),
                               a.ctx.stream);
}

void step_value(const KernelArgs& a) {  // the scalars' addresses in device memory, never read on the host
  launch_step_value(a.node.attrs.step_value == 0 ? &a.scalars->learning_rate : nullptr, &a.scalars->iterations,
                    a.output<float>(), a.ctx.stream);
}
void assign(const KernelArgs& a) {
  check(cudaMemcpyAsync(const_cast<void*>(a.in[0]), a.in[1],
                        static_cast<size_t>(a.in_shape(0).numel()) * dtype_size(a.in_dtypes[0]),
                        cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(a.ctx.stream)),
        "cudaMemcpyAsync", "Assign '" + a.node.name + "'");
}

}  // namespace

void register_tensor_kernels() {
  using graph::register_kernel;
  constexpr auto cuda = DeviceKind::cuda;
  constexpr auto f32 = DType::f32;
  register_kernel(cuda, Op::Unary, f32, unary);
  register_kernel(cuda, Op::UnaryGrad, f32, unary_grad);
  register_kernel(cuda, Op::Binary, f32, binary);
  register_kernel(cuda, Op::Compare, f32, compare);
  register_kernel(cuda, Op::Reduce, f32, reduce);
  register_kernel(cuda, Op::ArgReduce, f32, arg_reduce);
  register_kernel(cuda, Op::BatchMatMul, f32, batch_matmul);
  register_kernel(cuda, Op::StepValue, f32, step_value);
  register_kernel(cuda, Op::LayerNormStats, f32, ln_stats);
  register_kernel(cuda, Op::LayerNormApply, f32, ln_apply);
  register_kernel(cuda, Op::LayerNormInputGrad, f32, ln_input_grad);
  register_kernel(cuda, Op::LayerNormGammaGrad, f32, ln_gamma_grad);
  register_kernel(cuda, Op::LayerNormGrad, f32, ln_grad);
  graph::register_workspace(cuda, Op::BatchMatMul, batch_matmul_workspace);
  for (DType i : {DType::i32, DType::i64}) {
    register_kernel(cuda, Op::Binary, i, integer_binary);
    register_kernel(cuda, Op::Compare, i, integer_compare);
    register_kernel(cuda, Op::Reduce, i, integer_reduce);
    register_kernel(cuda, Op::ArgReduce, i, integer_arg_reduce);
  }
  for (DType i : {DType::i32, DType::i64}) {  // the kernels read the index dtype at run time
    register_kernel(cuda, Op::GatherGrad, KernelSignature({f32, i}, f32), gather_grad);
    register_kernel(cuda, Op::OneHot, KernelSignature({i}, f32), one_hot);
  }
  // int64 indices in 16 bits: widen.h's wrapper (registered later for the int32 signatures) around the same kernels.
  for (DType t : {DType::f16, DType::bf16}) {
    register_kernel(cuda, Op::GatherGrad, KernelSignature({t, DType::i64}, t),
                    backends::Widened<DeviceKind::cuda>::kernel);
    register_kernel(cuda, Op::OneHot, KernelSignature({DType::i64}, t), backends::Widened<DeviceKind::cuda>::kernel);
  }
  for (int t = 0; t < kDTypeCount; ++t) {  // values moved as bytes: every dtype
    const auto dt = static_cast<DType>(t);
    register_kernel(cuda, Op::Where, KernelSignature({DType::boolean, dt, dt}, dt), where);
    register_kernel(cuda, Op::BroadcastTo, dt, broadcast_to);
    register_kernel(cuda, Op::Transpose, dt, transpose);
    register_kernel(cuda, Op::Pad, dt, pad);
    register_kernel(cuda, Op::Assign, dt, assign);
    for (DType i : {DType::i32, DType::i64}) register_kernel(cuda, Op::Gather, KernelSignature({dt, i}, dt), gather);
  }
}

}  // namespace tk::cuda
#endif
