// BatchMatMul on the CPU. Where the batch axes are equal on both operands, or all 1 on one of them (a matrix times a
// batch), and oneDNN is built in: one oneDNN batched matmul primitive for the whole batch (its brgemm kernels split
// the batch between threads), built once per shape and thread count and kept, bound through per-thread memories (no
// allocation per step after the first). Otherwise (other broadcasting patterns, no oneDNN): one GEMM per batch element
// through gemm.h (OpenBLAS or oneDNN, the faster per shape), the operands' batch axes broadcast through math::Strided.
#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "backends/batch_layout.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/strided.h"
#include "graph/kernel.h"
#ifdef TK_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

using backends::batch_gemm_shape;
using backends::batch_part;

#ifdef TK_HAVE_ONEDNN
using dnnl::memory;
using dt = dnnl::memory::data_type;

// (batches, a batched?, b batched?) when one primitive can run the node: equal batch axes, or one side all 1s.
struct BatchForm {
  int64_t batches;
  bool a_batched, b_batched;
  auto operator<=>(const BatchForm&) const = default;
};
std::optional<BatchForm> batch_form(const graph::Graph& g, const graph::Node& n) {
  const Shape ab = batch_part(g[n.inputs[0]].shape), bb = batch_part(g[n.inputs[1]].shape);
  const Shape yb = batch_part(n.shape);
  const int64_t batches = yb.numel(), na = ab.numel(), nb = bb.numel();
  if (batches <= 1) return std::nullopt;  // a plain GEMM: gemm.h
  const bool a_full = na == batches && ab.rank() == yb.rank() && ab == yb;
  const bool b_full = nb == batches && bb.rank() == yb.rank() && bb == yb;
  if (a_full && b_full) return BatchForm{batches, true, true};
  if (a_full && nb == 1) return BatchForm{batches, true, false};
  if (b_full && na == 1) return BatchForm{batches, false, true};
  return std::nullopt;
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::matmul::primitive_desc describe(const BatchForm& f, const GemmShape& s, int threads) {
  const int64_t B = f.batches;
  const memory::desc a({f.a_batched ? B : 1, s.m, s.k}, dt::f32,
                       s.ta ? memory::dims{s.m * s.k, 1, s.m} : memory::dims{s.m * s.k, s.k, 1});
  const memory::desc b({f.b_batched ? B : 1, s.k, s.n}, dt::f32,
                       s.tb ? memory::dims{s.k * s.n, 1, s.k} : memory::dims{s.k * s.n, s.n, 1});
  const memory::desc c({B, s.m, s.n}, dt::f32, memory::dims{s.m * s.n, s.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);  // oneDNN sizes per-thread scratch by the team size at creation
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine());
  omp_set_num_threads(saved);
  return pd;
}

struct Batched {
  dnnl::matmul prim;
  memory::desc mds[4];  // a, b, c, scratchpad
  size_t scratch = 0;
};
using Key = std::tuple<BatchForm, int64_t, int64_t, int64_t, bool, bool, int>;

Batched& batched(const BatchForm& f, const GemmShape& s) {
  static std::mutex m;
  static std::map<Key, std::unique_ptr<Batched>> cache;
  const int threads = omp_get_max_threads();
  std::lock_guard lock(m);
  auto& slot = cache[Key{f, s.m, s.n, s.k, s.ta, s.tb, threads}];
  if (!slot) {
    const auto pd = describe(f, s, threads);
    slot = std::make_unique<Batched>();
    slot->prim = dnnl::matmul(pd);
    slot->scratch = pd.scratchpad_desc().get_size();
    const memory::desc d[4] = {pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc()};
    for (int i = 0; i < 4; ++i) slot->mds[i] = d[i];
  }
  return *slot;
}

void run_batched(Batched& p, const float* a, const float* b, float* c, void* workspace) {
  struct Bound {
    memory mem[4];
    dnnl_exec_arg_t args[4];
  };
  thread_local std::map<const Batched*, Bound> per_thread;  // made on a thread's first call, then reused
  auto [it, fresh] = per_thread.try_emplace(&p);
  Bound& bd = it->second;
  const int roles[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
  if (fresh)
    for (int i = 0; i < 4; ++i) {
      bd.mem[i] = memory(p.mds[i], engine(), DNNL_MEMORY_NONE);
      bd.args[i] = {roles[i], bd.mem[i].get()};
    }
  const void* ptrs[4] = {a, b, c, workspace};
  for (int i = 0; i < 4; ++i) dnnl_memory_set_data_handle(bd.mem[i].get(), const_cast<void*>(ptrs[i]));
  static thread_local dnnl::stream s(engine());
  dnnl_primitive_execute(p.prim.get(), s.get(), 4, bd.args);
  dnnl_stream_wait(s.get());
}
#endif

#ifdef TK_HAVE_ONEDNN
// The scratch the plan reserved per batched shape: the largest over the thread counts up to today's (the runtime only
// ever lowers the count, threads.h), so a primitive built for any later count fits.
std::mutex planned_mutex;
std::map<std::pair<BatchForm, std::tuple<int64_t, int64_t, int64_t, bool, bool>>, size_t> planned;
auto plan_key(const BatchForm& f, const GemmShape& s) {
  return std::make_pair(f, std::make_tuple(s.m, s.n, s.k, s.ta, s.tb));
}
#endif

size_t batch_matmul_workspace(const graph::Graph& g, int node) {
  const GemmShape s = batch_gemm_shape(g, g[node]);
#ifdef TK_HAVE_ONEDNN
  if (const auto f = batch_form(g, g[node])) {
    size_t bytes = 0;
    for (int t = 1; t <= omp_get_max_threads(); ++t)
      bytes = std::max(bytes, describe(*f, s, t).scratchpad_desc().get_size());
    std::lock_guard lock(planned_mutex);
    size_t& p = planned[plan_key(*f, s)];
    p = std::max(p, bytes);
    return std::max(bytes, gemm_workspace(s));  // the per-element loop's, should the primitive not fit
  }
#endif
  return gemm_workspace(s);
}

void batch_matmul(const KernelArgs& a) {
  const GemmShape s = batch_gemm_shape(a.g, a.node);
  const float* x = a.input<float>(0);  // (..., m, k) or (..., k, m)
  const float* w = a.input<float>(1);  // (..., k, n) or (..., n, k)
  float* y = a.output<float>();        // (..., m, n)
#ifdef TK_HAVE_ONEDNN
  if (const auto f = batch_form(a.g, a.node)) {
    // The primitive for this call's thread count; its scratch must fit what the plan reserved (else, as when the
    // node was never planned here, the per-element loop, whose gemm.h scratch the workspace covers).
    Batched& p = batched(*f, s);
    size_t reserved = 0;
    {
      std::lock_guard lock(planned_mutex);
      auto it = planned.find(plan_key(*f, s));
      if (it != planned.end()) reserved = it->second;
    }
    if (p.scratch <= reserved) {
      run_batched(p, x, w, y, a.workspace);
      return;
    }
  }
#endif
  const Shape ab = batch_part(a.in_shape(0)), bb = batch_part(a.in_shape(1)), yb = batch_part(a.node.shape);
  const math::Strided l = backends::broadcast_layout(yb, {&ab, &bb});
  const int64_t batches = yb.numel(), asize = s.m * s.k, bsize = s.k * s.n, ysize = s.m * s.n;
  for (int64_t i = 0; i < batches; ++i)
    gemm(s, x + math::strided_offset(l, 0, i) * asize, w + math::strided_offset(l, 1, i) * bsize, nullptr, nullptr,
         y + i * ysize, a.workspace);
}

}  // namespace

void register_batch_matmul_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::BatchMatMul, DType::f32, batch_matmul);
  graph::register_workspace(DeviceKind::cpu, Op::BatchMatMul, batch_matmul_workspace);
}

}  // namespace tk::cpu
