// What the oneDNN kernels share (gemm.cpp, gemm_bf16.cpp, batch_matmul.cpp, conv_onednn.cpp): the CPU engine, the
// user-scratchpad attribute (every buffer comes from the planned workspace), the row-major matmul descriptor and
// argument memories bound once and pointed at each call's buffers. Include only under TK_HAVE_ONEDNN.
#pragma once
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/gemm.h"

namespace tk::cpu {

// The CPU engine every primitive and memory here is made on.
inline dnnl::engine& onednn_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Primitive attributes with a user scratchpad (carved from the workspace: nothing allocated while a step runs).
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// s as a matmul on our row-major buffers as they are (strides describe the transposes, so no reorder): operands and
// bias in `in`, the product in `out`.
inline dnnl::matmul::desc matmul_desc(const GemmShape& s, dnnl::memory::data_type in, dnnl::memory::data_type out) {
  using dnnl::memory;
  const memory::desc a({s.m, s.k}, in, s.ta ? memory::dims{1, s.m} : memory::dims{s.k, 1});
  const memory::desc b({s.k, s.n}, in, s.tb ? memory::dims{1, s.k} : memory::dims{s.n, 1});
  const memory::desc c({s.m, s.n}, out, memory::dims{s.n, 1});
  const memory::desc bias = has_bias(s.epilogue) ? memory::desc({1, s.n}, in, memory::dims{s.n, 1}) : memory::desc();
  return dnnl::matmul::desc(a, b, bias, c);
}

// A matmul's primitive descriptor for a team of `threads` OpenMP threads (oneDNN sizes per-thread scratch by the team
// size at creation).
inline dnnl::matmul::primitive_desc matmul_for_threads(const dnnl::matmul::desc& d, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  dnnl::matmul::primitive_desc pd(d, user_scratchpad(), onednn_engine());
  omp_set_num_threads(saved);
  return pd;
}

// A primitive's N argument slots: memories without data made once, pointed at each call's buffers and run through
// the C API with this prebuilt array (the C++ execute() builds a container per call: a step allocates nothing).
template <int N>
struct OnednnArgs {
  dnnl::memory mem[N];  // by slot; a slot left unbound (an absent bias) stays null
  dnnl_exec_arg_t args[N];
  int nargs = 0;

  void bind(int slot, int role, const dnnl::memory::desc& md) {
    mem[slot] = dnnl::memory(md, onednn_engine(), DNNL_MEMORY_NONE);
    args[nargs++] = {role, mem[slot].get()};
  }
  // Runs prim on stream s (the caller's, made once per thread) with the bound slots pointed at ptrs, and waits.
  void run(const dnnl::primitive& prim, dnnl::stream& s, const void* const (&ptrs)[N]) {
    for (int i = 0; i < N; ++i)
      if (mem[i]) dnnl_memory_set_data_handle(mem[i].get(), const_cast<void*>(ptrs[i]));
    dnnl_primitive_execute(prim.get(), s.get(), nargs, args);
    dnnl_stream_wait(s.get());
  }
};

// Binds a matmul's a, b, bias (where it has one), c and scratchpad to slots 0-4.
inline void bind_matmul(OnednnArgs<5>& args, const dnnl::matmul::primitive_desc& pd, bool bias) {
  const dnnl::memory::desc mds[5] = {pd.src_desc(), pd.weights_desc(), pd.bias_desc(), pd.dst_desc(),
                                     pd.scratchpad_desc()};
  const int roles[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
  for (int i = 0; i < 5; ++i)
    if (i != 2 || bias) args.bind(i, roles[i], mds[i]);
}

}  // namespace tk::cpu
