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
#include "backends/cpu/onednn.h"
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

dnnl::matmul::primitive_desc describe(const BatchForm& f, const GemmShape& s, int threads) {
  const int64_t B = f.batches;
  const memory::desc a({f.a_batched ? B : 1, s.m, s.k}, dt::f32,
                       s.ta ? memory::dims{s.m * s.k, 1, s.m} : memory::dims{s.m * s.k, s.k, 1});
  const memory::desc b({f.b_batched ? B : 1, s.k, s.n}, dt::f32,
                       s.tb ? memory::dims{s.k * s.n, 1, s.k} : memory::dims{s.k * s.n, s.n, 1});
  const memory::desc c({B, s.m, s.n}, dt::f32, memory::dims{s.m * s.n, s.n, 1});
  return matmul_for_threads(dnnl::matmul::desc(a, b, c), threads);
}

struct Batched {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim{pd};
  size_t scratch = pd.scratchpad_desc().get_size();
};
using Key = std::tuple<BatchForm, int64_t, int64_t, int64_t, bool, bool, int>;

Batched& batched(const BatchForm& f, const GemmShape& s) {
  static std::mutex m;
  static std::map<Key, std::unique_ptr<Batched>> cache;
  const int threads = omp_get_max_threads();
  std::lock_guard lock(m);
  auto& slot = cache[Key{f, s.m, s.n, s.k, s.ta, s.tb, threads}];
  if (!slot) slot = std::make_unique<Batched>(describe(f, s, threads));
  return *slot;
}

void run_batched(Batched& p, const float* a, const float* b, float* c, void* workspace) {
  thread_local std::map<const Batched*, OnednnArgs<5>> per_thread;  // made on a thread's first call, then reused
  auto [it, fresh] = per_thread.try_emplace(&p);
  if (fresh) bind_matmul(it->second, p.pd, /*bias=*/false);
  static thread_local dnnl::stream s(onednn_engine());
  it->second.run(p.prim, s, {a, b, nullptr, c, workspace});
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
