// oneDNN convolutions against trainkit's own im2col + OpenBLAS Conv2D kernels, on the two convolutions of
// TensorFlow's tutorial CNN (NHWC, 5x5 kernels, "same" padding, batch 128):
//   conv1: x (128,28,28,1)  -> 32 filters      conv2: x (128,14,14,32) -> 64 filters
// For each: forward, backward-data (conv2 only: conv1 is the first layer) and backward-weights.
// oneDNN runs twice: (a) on the user layouts themselves (nhwc activations, hwio weights = trainkit's
// (KH,KW,C,F)), (b) on its preferred blocked layouts (format_tag::any), timing the primitive alone and,
// separately, the reorders of the two inputs and the output to/from the user layouts per call.
// Every oneDNN result is checked against trainkit's (max abs difference). Times: best of 5 repetitions.
//
//   OMP_NUM_THREADS=2 ./build-dnnl/bench/tk_bench_conv_backends
// (built only where oneDNN is found: Debian's libdnnl-dev, see bench/CMakeLists.txt)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/program.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace {
using namespace tk::graph;
using Clock = std::chrono::steady_clock;
using dnnl::memory;
using tag = memory::format_tag;

struct Conv {
  const char* name;
  int64_t n, h, w, c, k, f, pad;  // square kernel k, stride 1, symmetric padding
  int64_t oh() const { return h + 2 * pad - k + 1; }
  int64_t ow() const { return w + 2 * pad - k + 1; }
  double gflop() const { return 2.0 * double(n * oh() * ow() * k * k * c * f) / 1e9; }
  tk::Shape x() const { return {n, h, w, c}; }
  tk::Shape wt() const { return {k, k, c, f}; }
  tk::Shape y() const { return {n, oh(), ow(), f}; }
};
enum class Kind { forward, backward_data, backward_weights };
const char* kind_name(Kind k) {
  return k == Kind::forward ? "fwd" : k == Kind::backward_data ? "bwd_data" : "bwd_weights";
}

int64_t numel(const tk::Shape& s) { return s.numel(); }

// Milliseconds per call: warm-up, then the best of 5 repetitions of enough calls to fill ~0.2 s.
template <class F>
double best_ms(F&& f) {
  for (int i = 0; i < 3; ++i) f();
  auto t0 = Clock::now();
  f();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const int iters = std::clamp(int(0.2 / std::max(once, 1e-6)), 1, 200);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
  }
  return best * 1e3;
}

// Inputs and output of one op in user layout: forward (x, w) -> y; backward data (dy, w) -> dx;
// backward weights (x, dy) -> dw.
struct Problem {
  const Conv& cv;
  Kind kind;
  std::vector<float> in0, in1;
  tk::Shape in0_shape, in1_shape, out_shape;
};

struct Result {
  double ms = 0, reorder_ms = 0;
  std::string impl;
  std::vector<float> out;
};

Result run_trainkit(const Problem& pb) {
  Graph g;
  // Operands as variables (bound host tensors): program inputs are written only by a BatchStager.
  tk::Tensor ta(pb.in0_shape, tk::DType::f32), tb(pb.in1_shape, tk::DType::f32);
  std::copy(pb.in0.begin(), pb.in0.end(), ta.data<float>());
  std::copy(pb.in1.begin(), pb.in1.end(), tb.data<float>());
  const int a = g.variable("a", ta), b = g.variable("b", tb);
  Attrs at;
  at.kernel[0] = at.kernel[1] = pb.cv.k;
  for (auto& p : at.pad) p = pb.cv.pad;
  Op op = Op::Conv2D;
  if (pb.kind != Kind::forward) {
    op = pb.kind == Kind::backward_data ? Op::Conv2DGradInput : Op::Conv2DGradFilter;
    at.shape = pb.out_shape;
  }
  const int y = g.add(op, {a, b}, at);
  Program p(std::move(g), {y}, {}, tk::Device::cpu());
  ExecContext ctx;
  Result r;
  r.ms = best_ms([&] { p.run(ctx); });
  r.impl = "im2col+sgemm";
  const tk::Tensor out = p.output(y);
  r.out.assign(out.data<float>(), out.data<float>() + numel(pb.out_shape));
  return r;
}

// A memory descriptor's layout in oneDNN's notation (letters = logical dims by decreasing stride,
// upper case = blocked, then the inner blocks), e.g. "aBcd16b" for nChw16c.
std::string layout(const memory::desc& md) {
  const auto& d = md.data;
  if (d.format_kind != dnnl_blocked) return "?";
  const auto& b = d.format_desc.blocking;
  std::vector<int> order(size_t(d.ndims));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int i, int j) {  // ties (size-1 dims): those last
    return b.strides[i] != b.strides[j] ? b.strides[i] > b.strides[j] : d.dims[i] != 1 && d.dims[j] == 1;
  });
  std::string s;
  for (int i : order) {
    bool blocked = false;
    for (int k = 0; k < b.inner_nblks; ++k) blocked |= b.inner_idxs[k] == i;
    s += char((blocked ? 'A' : 'a') + i);
  }
  for (int k = 0; k < b.inner_nblks; ++k) s += std::to_string(b.inner_blks[k]) + char('a' + b.inner_idxs[k]);
  return s;
}

Result run_onednn(const Problem& pb, dnnl::algorithm alg, bool blocked, dnnl::engine& eng, dnnl::stream& st) {
  using namespace dnnl;
  const Conv& cv = pb.cv;
  const memory::dims xd{cv.n, cv.c, cv.h, cv.w}, wd{cv.f, cv.c, cv.k, cv.k}, yd{cv.n, cv.f, cv.oh(), cv.ow()};
  const memory::dims strides{1, 1}, pad{cv.pad, cv.pad};
  const memory::desc xu(xd, memory::data_type::f32, tag::nhwc), wu(wd, memory::data_type::f32, tag::hwio),
      yu(yd, memory::data_type::f32, tag::nhwc);
  auto md = [&](const memory::desc& user) {
    return blocked ? memory::desc(user.dims(), memory::data_type::f32, tag::any) : user;
  };
  convolution_forward::primitive_desc fwd({prop_kind::forward_training, alg, md(xu), md(wu), md(yu), strides, pad, pad},
                                          eng);
  primitive_desc_base pd = fwd;
  primitive prim;
  int args[3];  // the two inputs and the output, as oneDNN names them
  memory::desc user[3];
  if (pb.kind == Kind::forward) {
    prim = convolution_forward(fwd);
    args[0] = DNNL_ARG_SRC, args[1] = DNNL_ARG_WEIGHTS, args[2] = DNNL_ARG_DST;
    user[0] = xu, user[1] = wu, user[2] = yu;
  } else if (pb.kind == Kind::backward_data) {
    convolution_backward_data::primitive_desc bd({alg, md(xu), md(wu), md(yu), strides, pad, pad}, eng, fwd);
    pd = bd, prim = convolution_backward_data(bd);
    args[0] = DNNL_ARG_DIFF_DST, args[1] = DNNL_ARG_WEIGHTS, args[2] = DNNL_ARG_DIFF_SRC;
    user[0] = yu, user[1] = wu, user[2] = xu;
  } else {
    convolution_backward_weights::primitive_desc bw({alg, md(xu), md(wu), md(yu), strides, pad, pad}, eng, fwd);
    pd = bw, prim = convolution_backward_weights(bw);
    args[0] = DNNL_ARG_SRC, args[1] = DNNL_ARG_DIFF_DST, args[2] = DNNL_ARG_DIFF_WEIGHTS;
    user[0] = xu, user[1] = yu, user[2] = wu;
  }
  Result r;
  r.out.resize(size_t(numel(pb.out_shape)));
  float* user_ptr[3] = {const_cast<float*>(pb.in0.data()), const_cast<float*>(pb.in1.data()), r.out.data()};
  std::vector<memory> umem, pmem;  // user-layout and primitive-layout memories
  std::vector<std::pair<reorder, std::pair<memory, memory>>> to_prim, from_prim;
  std::unordered_map<int, memory> exec_args;
  r.impl = pd.impl_info_str();
  for (int i = 0; i < 3; ++i) {
    const memory::desc want = pd.query_md(query::exec_arg_md, args[i]);
    memory u(user[i], eng, user_ptr[i]);
    memory m = want == user[i] ? u : memory(want, eng);
    if (!(want == user[i])) {
      if (i < 2)
        to_prim.push_back({reorder(u, m), {u, m}});
      else
        from_prim.push_back({reorder(m, u), {m, u}});
    }
    r.impl += std::string(i ? "," : " [") + layout(want) + (i == 2 ? "]" : "");
    exec_args[args[i]] = m;
  }
  auto reorders_in = [&] {
    for (auto& [ro, mm] : to_prim) ro.execute(st, mm.first, mm.second);
  };
  auto reorders_out = [&] {
    for (auto& [ro, mm] : from_prim) ro.execute(st, mm.first, mm.second);
  };
  reorders_in();
  r.ms = best_ms([&] {
    prim.execute(st, exec_args);
    st.wait();
  });
  reorders_out();
  st.wait();
  if (!to_prim.empty() || !from_prim.empty())
    r.reorder_ms = best_ms([&] {
      reorders_in();
      reorders_out();
      st.wait();
    });
  return r;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}
float max_abs(const std::vector<float>& a) {
  float m = 0;
  for (float v : a) m = std::max(m, std::fabs(v));
  return m;
}
}  // namespace

int main() try {
  const std::vector<Conv> convs = {{"conv1", 128, 28, 28, 1, 5, 32, 2}, {"conv2", 128, 14, 14, 32, 5, 64, 2}};
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  const dnnl_version_t* v = dnnl_version();
  std::printf("threads %d, oneDNN %d.%d.%d (%s)\n\n", omp_get_max_threads(), v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](const tk::Shape& s) {
    std::vector<float> r(size_t(numel(s)));
    for (float& e : r) e = u(gen);
    return r;
  };
  struct Row {
    std::string op;
    double gflop;
    Result tk, nhwc, blk;
  };
  std::vector<Row> rows;
  for (const Conv& cv : convs)
    for (Kind k : {Kind::forward, Kind::backward_data, Kind::backward_weights}) {
      if (k == Kind::backward_data && cv.c == 1) continue;  // first layer: no input gradient needed
      Problem pb{cv, k, {}, {}, {}, {}, {}};
      if (k == Kind::forward) pb.in0_shape = cv.x(), pb.in1_shape = cv.wt(), pb.out_shape = cv.y();
      if (k == Kind::backward_data) pb.in0_shape = cv.y(), pb.in1_shape = cv.wt(), pb.out_shape = cv.x();
      if (k == Kind::backward_weights) pb.in0_shape = cv.x(), pb.in1_shape = cv.y(), pb.out_shape = cv.wt();
      pb.in0 = random(pb.in0_shape), pb.in1 = random(pb.in1_shape);
      const std::string op = std::string(cv.name) + " " + kind_name(k);
      Row row{op, cv.gflop(), run_trainkit(pb), {}, {}};
      const float scale = max_abs(row.tk.out);
      for (bool blocked : {false, true})
        for (auto alg : {dnnl::algorithm::convolution_direct, dnnl::algorithm::convolution_auto}) {
          Result r = run_onednn(pb, alg, blocked, eng, st);
          std::printf("%-17s %-7s %-6s %8.3f ms  reorders %6.3f ms  max|diff| %.2e (max|ref| %.1f)  %s\n", op.c_str(),
                      blocked ? "blocked" : "nhwc", alg == dnnl::algorithm::convolution_direct ? "direct" : "auto",
                      r.ms, r.reorder_ms, max_abs_diff(r.out, row.tk.out), scale, r.impl.c_str());
          Result& slot = blocked ? row.blk : row.nhwc;  // keep the faster of direct / auto
          if (slot.out.empty() || r.ms < slot.ms) slot = std::move(r);
        }
      rows.push_back(std::move(row));
    }
  auto cell = [](double ms, double gflop) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.3f (%.0f)", ms, gflop / ms * 1e3);
    return std::string(buf);
  };
  std::printf("\nms per call (GFLOP/s); oneDNN columns: faster of direct/auto; ratio = trainkit / oneDNN\n");
  std::printf("%-17s | %-16s | %-16s | %-28s | %-8s | %s\n", "op", "trainkit", "oneDNN nhwc",
              "oneDNN blocked (+reorders)", "tk/nhwc", "tk/(blocked+reorders)");
  for (const Row& r : rows) {
    char blk[64];
    std::snprintf(blk, sizeof blk, "%s +%.3f", cell(r.blk.ms, r.gflop).c_str(), r.blk.reorder_ms);
    std::printf("%-17s | %-16s | %-16s | %-28s | %-8.2f | %.2f\n", r.op.c_str(), cell(r.tk.ms, r.gflop).c_str(),
                cell(r.nhwc.ms, r.gflop).c_str(), blk, r.tk.ms / r.nhwc.ms, r.tk.ms / (r.blk.ms + r.blk.reorder_ms));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
