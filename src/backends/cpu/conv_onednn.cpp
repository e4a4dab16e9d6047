// Conv2D and its gradients through oneDNN (Debian's libdnnl, OpenMP runtime: the same thread pool as
// our kernels and OpenBLAS). Chosen by measurement (docs/benchmarks.md): oneDNN's direct AVX-512
// convolutions in blocked layouts, including the reorders from and to our NHWC/HWIO tensors, ran
// 2.1–4.5x faster than im2col + OpenBLAS on the tutorial CNN's convolutions. TK_CONV=im2col selects
// the im2col kernels instead.
//
// Every buffer oneDNN needs (blocked copies of the inputs and output, and its scratchpad) is carved from
// the program's workspace, whose size the planner asks for through register_workspace — so the memory
// plan stays exact and nothing is allocated while a step runs (primitives are built once per shape).
#ifdef TK_HAVE_ONEDNN
#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backends/cpu/conv_grouped.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/onednn.h"
#include "backends/cpu/relu_pass.h"
#include "backends/cpu/threads.h"
#include "graph/kernel.h"
#include "graph/window.h"
#include "runtime/settings.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::Window;

namespace {
using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

constexpr Op kConvOps[4] = {Op::Conv2D, Op::FusedConv2D, Op::Conv2DGradInput, Op::Conv2DGradFilter};

// One convolution (op, shapes, window): the primitive, the reorders between our layouts and oneDNN's,
// and memory objects whose data handles are set at every call.
struct Conv {
  // Roles: a, b are the primitive's two inputs; c its output (fwd: src, weights -> dst;
  // bwd_data: diff_dst, weights -> diff_src; bwd_weights: src, diff_dst -> diff_weights).
  memory user[3], inner[3], scratch;
  memory bias;  // FusedConv2D: the bias (F), read where it is
  dnnl::primitive prim;
  std::array<std::unique_ptr<dnnl::reorder>, 3> reorder;  // null when the layouts already agree
  // The primitive's and the reorders' arguments as C arrays, built once: the C++ execute() would build a container
  // per call.
  std::vector<dnnl_exec_arg_t> exec_args;
  std::array<std::array<dnnl_exec_arg_t, 2>, 3> reorder_args{};
  int arg_of[3];
  size_t offset[4] = {0, 0, 0, 0};  // in the workspace: inner a, b, c, scratchpad
  size_t workspace = 0;
};

// The op (relu: FusedConv2D with the relu epilogue, its own entry; the primitive is the same, run() adds the relu), the
// dtype, the window (its 16 fields), filters, groups, and the thread (argument memories are per thread).
using Key = std::tuple<Op, bool, DType, std::array<int64_t, 16>, int64_t, int64_t, int64_t>;
Key key_of(Op op, const Window& g, int64_t f, int64_t groups, bool relu, DType t) {
  return {op, relu, t, std::bit_cast<std::array<int64_t, 16>>(g), f, groups, thread_index()};
}

// t: float32, or bfloat16 where the CPU computes it natively (every operand, the bias and the result in
// bfloat16; oneDNN accumulates in float32 and rounds once).
// groups > 1: oneDNN's grouped convolution (weights (G, F/G, C/G, KH, KW); our (KH, KW, C/G, F) is its hwigo).
Conv build(Op op, const Window& g, int64_t f, int64_t groups, DType t) {
  const memory::dims src{g.n, g.c, g.h, g.w}, dst{g.n, f, g.oh, g.ow};
  const bool grouped = groups > 1;
  const memory::dims wei =
      grouped ? memory::dims{groups, f / groups, g.c / groups, g.kh, g.kw} : memory::dims{f, g.c, g.kh, g.kw};
  const memory::dims strides{g.sh, g.sw}, dilates{g.dh - 1, g.dw - 1}, pad_l{g.pt, g.pl}, pad_r{g.pb, g.pr};
  const dt type = t == DType::bf16 ? dt::bf16 : dt::f32;
  auto any = [type](const memory::dims& d) { return memory::desc(d, type, tag::any); };
  const memory::desc user_src(src, type, tag::nhwc), user_wei(wei, type, grouped ? tag::hwigo : tag::hwio),
      user_dst(dst, type, tag::nhwc);
  const dnnl::primitive_attr attr = user_scratchpad();
  const bool fused = op == Op::FusedConv2D;
  const memory::desc bias_md({f}, type, tag::a);
  // No relu post-op: run() applies the relu after the convolution (oneDNN's maps NaN to 0: relu_pass.h).
  const auto fwd_desc =
      fused ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                              any(src), any(wei), bias_md, any(dst), strides, dilates, pad_l, pad_r)
            : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                              any(src), any(wei), any(dst), strides, dilates, pad_l, pad_r);
  const auto fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, attr, onednn_engine());
  Conv c;
  memory::desc user_md[3], inner_md[3], scratch_md;
  if (op == Op::Conv2D || fused) {
    user_md[0] = user_src, user_md[1] = user_wei, user_md[2] = user_dst;
    inner_md[0] = fwd_pd.src_desc(), inner_md[1] = fwd_pd.weights_desc(), inner_md[2] = fwd_pd.dst_desc();
    scratch_md = fwd_pd.scratchpad_desc();
    c.prim = dnnl::convolution_forward(fwd_pd);
    c.arg_of[0] = DNNL_ARG_SRC, c.arg_of[1] = DNNL_ARG_WEIGHTS, c.arg_of[2] = DNNL_ARG_DST;
  } else if (op == Op::Conv2DGradInput) {
    const auto d = dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(src), any(wei),
                                                         any(dst), strides, dilates, pad_l, pad_r);
    const auto pd = dnnl::convolution_backward_data::primitive_desc(d, attr, onednn_engine(), fwd_pd);
    user_md[0] = user_dst, user_md[1] = user_wei, user_md[2] = user_src;
    inner_md[0] = pd.diff_dst_desc(), inner_md[1] = pd.weights_desc(), inner_md[2] = pd.diff_src_desc();
    scratch_md = pd.scratchpad_desc();
    c.prim = dnnl::convolution_backward_data(pd);
    c.arg_of[0] = DNNL_ARG_DIFF_DST, c.arg_of[1] = DNNL_ARG_WEIGHTS, c.arg_of[2] = DNNL_ARG_DIFF_SRC;
  } else {
    const auto d = dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(src), any(wei),
                                                            any(dst), strides, dilates, pad_l, pad_r);
    const auto pd = dnnl::convolution_backward_weights::primitive_desc(d, attr, onednn_engine(), fwd_pd);
    user_md[0] = user_src, user_md[1] = user_dst, user_md[2] = user_wei;
    inner_md[0] = pd.src_desc(), inner_md[1] = pd.diff_dst_desc(), inner_md[2] = pd.diff_weights_desc();
    scratch_md = pd.scratchpad_desc();
    c.prim = dnnl::convolution_backward_weights(pd);
    c.arg_of[0] = DNNL_ARG_SRC, c.arg_of[1] = DNNL_ARG_DIFF_DST, c.arg_of[2] = DNNL_ARG_DIFF_WEIGHTS;
  }
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    c.user[i] = memory(user_md[i], onednn_engine(), DNNL_MEMORY_NONE);
    if (inner_md[i] == user_md[i]) {
      c.inner[i] = c.user[i];
      continue;
    }
    c.inner[i] = memory(inner_md[i], onednn_engine(), DNNL_MEMORY_NONE);
    c.offset[i] = at;
    at += align64(inner_md[i].get_size());
    c.reorder[static_cast<size_t>(i)] = i < 2 ? std::make_unique<dnnl::reorder>(c.user[i], c.inner[i])
                                              : std::make_unique<dnnl::reorder>(c.inner[i], c.user[i]);
  }
  c.offset[3] = at;
  c.scratch = memory(scratch_md, onednn_engine(), DNNL_MEMORY_NONE);
  c.workspace = at + align64(scratch_md.get_size());
  for (int i = 0; i < 3; ++i) c.exec_args.push_back({c.arg_of[i], c.inner[i].get()});
  c.exec_args.push_back({DNNL_ARG_SCRATCHPAD, c.scratch.get()});
  if (fused) {
    c.bias = memory(bias_md, onednn_engine(), DNNL_MEMORY_NONE);
    c.exec_args.push_back({DNNL_ARG_BIAS, c.bias.get()});
  }
  for (size_t i = 0; i < 3; ++i) {
    const bool to_inner = i < 2;  // inputs are reordered into oneDNN's layout, the output back out of it
    c.reorder_args[i] = {dnnl_exec_arg_t{DNNL_ARG_FROM, (to_inner ? c.user[i] : c.inner[i]).get()},
                         dnnl_exec_arg_t{DNNL_ARG_TO, (to_inner ? c.inner[i] : c.user[i]).get()}};
  }
  return c;
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<Key, std::unique_ptr<Conv>>& cache() {
  static std::map<Key, std::unique_ptr<Conv>> c;
  return c;
}

// The window and filter count of a conv op node.
std::pair<Window, int64_t> geometry(const graph::Graph& gr, const graph::Node& n) {
  if (n.op == Op::Conv2D || n.op == Op::FusedConv2D)
    return {Window::of(gr[n.inputs[0]].shape, n.attrs), gr[n.inputs[1]].shape[3]};
  if (n.op == Op::Conv2DGradInput) return {Window::of(n.attrs.shape, n.attrs), gr[n.inputs[1]].shape[3]};
  return {Window::of(gr[n.inputs[0]].shape, n.attrs), n.attrs.shape[3]};  // Conv2DGradFilter
}

// bfloat16 memory where this CPU computes it natively; elsewhere a 16-bit node runs widened (widen.cpp) and this
// float32 convolution sees float32 copies in the workspace, so its primitive must be float32 too.
DType compute_dtype(const graph::Node& n) {
  return n.dtype == DType::bf16 && onednn_bf16_native() ? DType::bf16 : DType::f32;
}

Conv& conv_for(const graph::Node& n, const Window& g, int64_t f) {
  const bool relu = n.op == Op::FusedConv2D && n.attrs.epilogue == Op::Relu;
  const DType t = compute_dtype(n);
  std::lock_guard lock(cache_mutex());
  auto& slot = cache()[key_of(n.op, g, f, n.attrs.groups, relu, t)];
  if (!slot) slot = std::make_unique<Conv>(build(n.op, g, f, n.attrs.groups, t));
  return *slot;
}

// A depthwise convolution's float32 gradients run directly (conv_grouped.h): oneDNN's grouped backward-weights
// took ~30 ms for MobileNetV2's 960 channels at 1x1 (batch 64), the direct loop under 1; its backward-data ~5 ms
// for 384 channels at 2x2.
bool direct_depthwise_grad(const graph::Node& n, const Window& g) {
  return (n.op == Op::Conv2DGradFilter || n.op == Op::Conv2DGradInput) && n.dtype == DType::f32 && n.attrs.groups > 1 &&
         n.attrs.groups == g.c;
}

size_t workspace(const graph::Graph& gr, int node) {
  auto [g, f] = geometry(gr, gr[node]);
  if (direct_depthwise_grad(gr[node], g)) return 0;
  return conv_for(gr[node], g, f).workspace;
}

void run(const KernelArgs& a) {
  auto [g, f] = geometry(a.g, a.node);
  if (direct_depthwise_grad(a.node, g))
    return a.node.op == Op::Conv2DGradInput ? depthwise_conv2d_grad_input(a) : depthwise_conv2d_grad_filter(a);
  Conv& c = conv_for(a.node, g, f);
  auto* ws = static_cast<char*>(a.workspace);
  c.user[0].set_data_handle(const_cast<void*>(a.in[0]));
  c.user[1].set_data_handle(const_cast<void*>(a.in[1]));
  c.user[2].set_data_handle(a.out);
  if (c.bias) c.bias.set_data_handle(const_cast<void*>(a.in[2]));
  for (int i = 0; i < 3; ++i)
    if (c.reorder[static_cast<size_t>(i)]) c.inner[i].set_data_handle(ws + c.offset[i]);
  c.scratch.set_data_handle(ws + c.offset[3]);
  static thread_local dnnl::stream s(onednn_engine());  // created once per thread: no allocation per step
  auto reorder = [&](size_t i) {
    if (c.reorder[i]) dnnl_primitive_execute(c.reorder[i]->get(), s.get(), 2, c.reorder_args[i].data());
  };
  reorder(0), reorder(1);
  dnnl_primitive_execute(c.prim.get(), s.get(), static_cast<int>(c.exec_args.size()), c.exec_args.data());
  reorder(2);
  dnnl_stream_wait(s.get());
  if (a.node.op == Op::FusedConv2D && a.node.attrs.epilogue == Op::Relu)  // in NHWC, our relu (relu_pass.h)
    relu_in_place(a.out, a.node.shape.numel(), compute_dtype(a.node));
}

graph::WorkspaceFn g_widened_ws[4] = {};  // per conv op: the widened kernels' rule (float16, float32)

size_t bf16_or_widened_workspace(const graph::Graph& gr, int node) {
  if (gr[node].dtype == DType::bf16) return workspace(gr, node);
  const auto i = std::ranges::find(kConvOps, gr[node].op) - std::begin(kConvOps);
  return i < 4 && g_widened_ws[i] ? g_widened_ws[i](gr, node) : 0;
}

}  // namespace

bool register_onednn_bf16_conv_kernels() {
  const char* choice = runtime::setting_raw(runtime::Setting::conv);
  if ((choice && std::string(choice) == "im2col") || !onednn_bf16_native()) return false;
  for (int i = 0; i < 4; ++i) {
    g_widened_ws[i] = graph::registered_workspace(DeviceKind::cpu, kConvOps[i]);
    graph::register_kernel(DeviceKind::cpu, kConvOps[i], DType::bf16, run);
    graph::register_workspace(DeviceKind::cpu, kConvOps[i], bf16_or_widened_workspace);
  }
  return true;
}

bool register_onednn_conv_kernels() {
  const char* choice = runtime::setting_raw(runtime::Setting::conv);
  if (choice && std::string(choice) == "im2col") return false;
  for (Op op : kConvOps) {
    graph::register_kernel(DeviceKind::cpu, op, DType::f32, run);
    graph::register_workspace(DeviceKind::cpu, op, workspace);
  }
  return true;
}

}  // namespace tk::cpu
#else
namespace tk::cpu {
bool register_onednn_conv_kernels() { return false; }
bool register_onednn_bf16_conv_kernels() { return false; }
}  // namespace tk::cpu
#endif
