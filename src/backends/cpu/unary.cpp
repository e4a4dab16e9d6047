// The general Unary op and its gradient on the CPU (graph/tensor_fns.h's functions, backends/math/unary.h's math):
// one vectorized loop per function.
#include "backends/math/unary.h"

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;
using graph::UnaryFn;

template <UnaryFn F>
void forward(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float* x = a.input<float>(0);  // (n)
  float* y = a.output<float>();        // (n)
  const float p0 = a.node.attrs.fn_param[0], p1 = a.node.attrs.fn_param[1];
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = math::unary<F>(x[i], p0, p1);
  });
}

template <UnaryFn F>
void backward(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float* dy = a.input<float>(0);  // (n)
  const float* x = a.input<float>(1);   // (n)
  float* dx = a.output<float>();        // (n)
  const float p0 = a.node.attrs.fn_param[0], p1 = a.node.attrs.fn_param[1];
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dx[i] = math::unary_grad<F>(dy[i], x[i], p0, p1);
  });
}

// The node's function, forward or (Grad) its gradient.
template <bool Grad>
void dispatch(const KernelArgs& a) {
  switch (a.node.attrs.unary) {
#define TK_CASE(name) \
  case UnaryFn::name: \
    return Grad ? backward<UnaryFn::name>(a) : forward<UnaryFn::name>(a);
    TK_UNARY_FNS(TK_CASE)
#undef TK_CASE
    case UnaryFn::kCount:
      break;
  }
  unknown_function(a.node, "attrs.unary");
}

}  // namespace

void unknown_function(const graph::Node& node, const char* field) {
  throw InvalidArgument(std::string(graph::op_name(node.op)) + " '" + node.name + "': " + field +
                        " names no function (a graph built without setting it)");
}

void register_unary_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::Unary, DType::f32, dispatch<false>);
  graph::register_kernel(DeviceKind::cpu, Op::UnaryGrad, DType::f32, dispatch<true>);
}

}  // namespace tk::cpu
