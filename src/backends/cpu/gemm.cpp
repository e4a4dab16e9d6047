// GEMM engines and the per-shape choice between them (gemm.h).
//
// OpenBLAS path: cblas_sgemm, then one pass over c for the epilogue (bias, relu, relu mask) while c is still
// in cache. oneDNN path: the matmul primitive on our row-major buffers as they are (strides describe the
// transposes, so no reorder), the bias as the primitive's input; the relu and the relu mask of relu_grad are applied
// by the same pass as OpenBLAS' — not oneDNN's relu post-op, which maps NaN to 0 (its vmaxps keeps the zero operand;
// TensorFlow's relu keeps NaN: docs/architecture.md, "NaN and Inf").
// oneDNN is called through its C API with a prebuilt argument array: the C++ execute() builds a std::vector
// per call, and a step allocates nothing.
#include "backends/cpu/gemm.h"

#include <cblas.h>
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "backends/cpu/column_sums.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/threads.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

#ifdef TK_HAVE_ONEDNN
#include "backends/cpu/onednn.h"
#endif

namespace tk::cpu {
namespace {

constexpr std::string_view kEpilogueNames[] = {"none", "bias", "bias_relu", "relu", "relu_grad"};
constexpr std::string_view kEngineNames[] = {"openblas", "onednn"};
// Below this many FLOPs a GEMM takes microseconds on either engine; measuring would cost more than it could
// save, so OpenBLAS (no JIT) runs it.
constexpr double kMeasureFlops = 2.0e6;

// c = relu_grad(c), with c's column sums: one pass over fixed chunks of rows (column_sums.h).
void relu_grad_sums_pass(const GemmShape& s, const float* y, float* c, const SumsOut& sums) {
  const int64_t n = s.n;
  const ColumnSums cs(s.m, n);
  parallel_chunks(cs, sums.partial, [&](int64_t k, int64_t r0, int64_t r1) {
    for_row_tiles(r0, r1, n, [&](int64_t t0, int64_t t1) {  // a tile of rows masked, then summed from L1
      float* __restrict out = c;
      const float* __restrict keep = y;
#pragma omp simd
      for (int64_t i = t0 * n; i < t1 * n; ++i) out[i] = keep[i] > 0.0f ? out[i] : 0.0f;
      add_column_sums(c, n, t0, t1, sums.partial + k * n);
    });
  });
  cs.finish(sums.partial, sums.out);
}

// c(m,n) = epilogue(c): one pass, rows split across threads.
void epilogue_pass(const GemmShape& s, const float* bias, const float* y, float* c, const SumsOut* sums = nullptr) {
  const int64_t n = s.n;
  const Epilogue e = s.epilogue;
  if (sums) {
    if (e != Epilogue::relu_grad) throw Unsupported("GEMM column sums with an epilogue other than relu_grad");
    relu_grad_sums_pass(s, y, c, *sums);
    return;
  }
  parallel_for(
      s.m,
      [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          float* row = c + r * n;
          if (e == Epilogue::bias) {
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
          } else if (e == Epilogue::bias_relu) {
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) row[j] = std::max(row[j] + bias[j], 0.0f);
          } else if (e == Epilogue::relu) {
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) row[j] = std::max(row[j], 0.0f);
          } else if (e == Epilogue::relu_grad) {
            const float* yr = y + r * n;
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) row[j] = yr[j] > 0.0f ? row[j] : 0.0f;
          }
        }
      },
      kParallelGrain / std::max<int64_t>(n, 1));
}

void openblas_gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(s.m), static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, a,
              static_cast<blasint>(s.ta ? s.m : s.k), b, static_cast<blasint>(s.tb ? s.k : s.n), 0.0f, c,
              static_cast<blasint>(s.n));
}

#ifdef TK_HAVE_ONEDNN
using dt = dnnl::memory::data_type;

// The primitive descriptor for s, with `threads` OpenMP threads.
dnnl::matmul::primitive_desc describe(const GemmShape& s, int threads) {
  return matmul_for_threads(matmul_desc(s, dt::f32, dt::f32), threads);
}

// A built matmul. The primitive may run on several threads at once (data-parallel replicas run the same shapes
// side by side); the memories its arguments are bound through, whose data handles are set at each call, are per
// thread (made on a thread's first call, then reused: no allocation per step).
struct Dnnl {
  uint64_t id;  // the key of each thread's argument memories (addresses are reused, ids are not)
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  bool bias;
  size_t scratch;

  explicit Dnnl(const GemmShape& s)
      : id(next_id()),
        pd(describe(s, omp_get_max_threads())),
        prim(pd),
        bias(has_bias(s.epilogue)),
        scratch(pd.scratchpad_desc().get_size()) {}
  static uint64_t next_id() {
    static std::atomic<uint64_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed);
  }
  OnednnArgs<5>& bound() {
    thread_local std::map<uint64_t, OnednnArgs<5>> per_thread;
    auto [it, fresh] = per_thread.try_emplace(id);
    if (fresh) bind_matmul(it->second, pd, bias);
    return it->second;
  }
  void run(const float* a, const float* b, const float* bias_data, float* c, void* workspace) {
    OnednnArgs<5>& bd = bound();
    static thread_local dnnl::stream s(onednn_engine());  // one per thread, made once: no allocation per step
    bd.run(prim, s, {a, b, bias_data, c, workspace});
  }
};
#endif

// One shape on one thread count: the engine chosen for it and, once built, its oneDNN primitive.
struct Entry {
  bool decided = false;
  GemmEngine engine = GemmEngine::openblas;
  double seconds[2] = {0, 0};  // measured per engine (0: not measured)
  size_t planned_scratch = 0;  // what gemm_workspace asked the planner for
  bool listed = false;         // measured here or restored from a saved state: gemm_choices() lists it
  // Restored from a saved state (set_gemm_choices): listed by gemm_choices(shapes) whatever `shapes`, so a resumed
  // run's state names the engines its backup did even when it builds no program with that shape (a run resumed
  // after the last step trains nothing, and its final state must equal an uninterrupted run's).
  bool restored = false;
#ifdef TK_HAVE_ONEDNN
  std::unique_ptr<Dnnl> dnnl;
#endif
};

struct Key {
  GemmShape s;
  int threads;
  auto operator<=>(const Key&) const = default;
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<Key, Entry>& registry() {
  static std::map<Key, Entry> r;
  return r;
}

const char* forced_engine() {
  static const char* forced = [] {
    const char* e = runtime::setting_raw(runtime::Setting::gemm);
    return e && *e && std::string_view(e) != "auto" ? e : nullptr;
  }();
  return forced;
}

// Parses "m,n,k,ta,tb,epilogue,threads=engine;..." (';' or newlines between items) into decided entries; items
// that do not parse, name an unknown epilogue or engine, or an engine this build lacks are skipped; decided entries
// are kept unless `override`. Caller holds the registry lock.
void apply_choices(const std::string& text, bool listed, bool override, bool restored = false) {
  std::string item;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find_first_of(";\n", at), text.size());
    item = text.substr(at, end - at);
    at = end + 1;
    long long m, n, k;
    int ta, tb, threads;
    char epi[16], eng[16];
    if (std::sscanf(item.c_str(), "%lld,%lld,%lld,%d,%d,%15[a-z_],%d=%15[a-z]", &m, &n, &k, &ta, &tb, epi, &threads,
                    eng) != 8 ||
        m < 0 || n < 0 || k < 0 || threads < 1)
      continue;
    const auto epilogue = std::ranges::find(kEpilogueNames, std::string_view(epi));
    const std::string_view engine(eng);
    if (epilogue == std::end(kEpilogueNames) || (engine != "openblas" && engine != "onednn")) continue;
    const GemmShape shape{m, n, k, ta != 0, tb != 0, static_cast<Epilogue>(epilogue - std::begin(kEpilogueNames))};
#ifndef TK_HAVE_ONEDNN
    if (engine == "onednn") continue;
#endif
    Entry& e = registry()[Key{shape, threads}];
    if (e.decided && !override) continue;
    e.decided = true;
    e.listed = e.listed || listed;
    e.restored = e.restored || restored;
    e.engine = engine == "onednn" ? GemmEngine::onednn : GemmEngine::openblas;
#ifdef TK_HAVE_ONEDNN
    if (e.engine == GemmEngine::openblas) e.dnnl.reset();
#endif
  }
}

// The machine's choice cache (as FFTW's wisdom): every measurement is appended to a file per CPU model, and a new
// process starts from it, so runs on one machine make the same choices (and compute the same bits) instead of
// re-measuring with noise. TK_GEMM_CACHE=<file> names the file, TK_GEMM_CACHE=0 turns it off; the default is
// $XDG_CACHE_HOME/trainkit (or ~/.cache/trainkit)/gemm-<cpu model>.txt.
std::string cache_file() {
  static const std::string path = [] {
    const char* env = runtime::setting_raw(runtime::Setting::gemm_cache);
    if (env && (std::string_view(env) == "0" || std::string_view(env) == "off")) return std::string();
    if (env && *env) return std::string(env);
    std::string dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
      dir = xdg;
    else if (const char* home = std::getenv("HOME"); home && *home)
      dir = std::string(home) + "/.cache";
    else
      return std::string();
    std::string model = "cpu";
    if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "model name", 10) == 0 && std::strchr(line, ':')) {
          model.clear();
          for (const char* c = std::strchr(line, ':') + 1; *c; ++c)
            if (std::isalnum(static_cast<unsigned char>(*c)))
              model += *c;
            else if (!model.empty() && model.back() != '-')
              model += '-';
          while (!model.empty() && model.back() == '-') model.pop_back();
          break;
        }
      std::fclose(f);
    }
    return dir + "/trainkit/gemm-" + model + ".txt";
  }();
  return path;
}

// Reads the cache file into the registry; choices made or restored here win (caller holds the registry lock).
void read_cache() {
  const std::string path = cache_file();
  if (path.empty()) return;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  apply_choices(text, /*listed=*/true, /*override=*/false);
}

// Loads the cache once (caller holds the registry lock).
void load_cache() {
  static bool loaded = false;
  if (loaded) return;
  loaded = true;
  read_cache();
}

// Appends one measured choice: a single write of a short line with O_APPEND, so concurrent processes never
// interleave within a line; a torn last line does not parse and is skipped. Failing to write only costs a
// re-measurement next time.
void append_to_cache(const std::string& line) {
  const std::string path = cache_file();
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t wrote = ::write(fd, text.data(), text.size());
  ::close(fd);
}

bool profiling() {
  static const bool on = runtime::setting_bool_or_default(runtime::Setting::profile);
  return on;
}

std::string describe_key(const Key& k) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%d,%d,%s,%d", static_cast<long long>(k.s.m),
                static_cast<long long>(k.s.n), static_cast<long long>(k.s.k), k.s.ta ? 1 : 0, k.s.tb ? 1 : 0,
                kEpilogueNames[static_cast<int>(k.s.epilogue)].data(), k.threads);
  return buf;
}

void run_engine(GemmEngine e, Entry& entry, const GemmShape& s, const float* a, const float* b, const float* bias,
                const float* y, float* c, void* workspace, const SumsOut* sums = nullptr) {
#ifdef TK_HAVE_ONEDNN
  if (e == GemmEngine::onednn) {
    entry.dnnl->run(a, b, bias, c, workspace);
    if (s.epilogue == Epilogue::relu_grad) {
      epilogue_pass(s, bias, y, c, sums);
    } else if (has_relu(s.epilogue)) {  // the bias is in; the relu is ours (oneDNN's maps NaN to 0)
      GemmShape relu = s;
      relu.epilogue = Epilogue::relu;
      epilogue_pass(relu, nullptr, nullptr, c);
    }
    return;
  }
#else
  (void)e, (void)entry;
#endif
  openblas_gemm(s, a, b, c);
  if (s.epilogue != Epilogue::none) epilogue_pass(s, bias, y, c, sums);
}

// Chooses the engine for a new entry: forced, too small to matter, or the faster of both on this call's
// buffers (c is overwritten; the caller computes the real result afterwards).
void decide(const Key& key, Entry& entry, const float* a, const float* b, const float* bias, const float* y, float* c,
            void* workspace) {
  entry.decided = true;
  entry.engine = GemmEngine::openblas;
#ifdef TK_HAVE_ONEDNN
  const GemmShape& s = key.s;
  const char* forced = forced_engine();
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const bool want = forced ? std::string_view(forced) == "onednn" : flops >= kMeasureFlops;
  if (!want) return;
  try {
    entry.dnnl = std::make_unique<Dnnl>(s);
  } catch (const dnnl::error&) {
    return;  // oneDNN has no kernel for this case: OpenBLAS runs it
  }
  if (entry.dnnl->scratch > entry.planned_scratch) {  // more threads than planned for: never overrun the workspace
    entry.dnnl.reset();
    return;
  }
  if (forced) {
    entry.engine = GemmEngine::onednn;
    return;
  }
  using clock = std::chrono::steady_clock;
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 4; ++round)
    for (int e = 0; e < 2; ++e) {
      const auto t0 = clock::now();
      run_engine(static_cast<GemmEngine>(e), entry, s, a, b, bias, y, c, workspace);
      const double took = std::chrono::duration<double>(clock::now() - t0).count();
      if (round > 0) best[e] = std::min(best[e], took);  // round 0 warms caches (and oneDNN's first run)
    }
  entry.seconds[0] = best[0], entry.seconds[1] = best[1];
  entry.listed = true;
  // OpenBLAS stays unless oneDNN is clearly faster (3%): a coin flip between equals would only add noise.
  entry.engine = best[1] < 0.97 * best[0] ? GemmEngine::onednn : GemmEngine::openblas;
  if (entry.engine == GemmEngine::openblas) entry.dnnl.reset();
  append_to_cache(describe_key(key) + "=" + std::string(kEngineNames[static_cast<int>(entry.engine)]));
  if (profiling())
    std::fprintf(stderr, "TK_PROFILE gemm %s: %s (openblas %.1f us, onednn %.1f us, %.1f GFLOP/s)\n",
                 describe_key(key).c_str(), kEngineNames[static_cast<int>(entry.engine)].data(), best[0] * 1e6,
                 best[1] * 1e6, flops / std::min(best[0], best[1]) / 1e9);
#else
  (void)key, (void)a, (void)b, (void)bias, (void)y, (void)c, (void)workspace;
#endif
}

}  // namespace

bool onednn_gemm_available() {
#ifdef TK_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

size_t gemm_workspace(const GemmShape& s) {
#ifdef TK_HAVE_ONEDNN
  const char* forced = forced_engine();
  if (forced && std::string_view(forced) != "onednn") return 0;
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  if (!forced && flops < kMeasureFlops) return 0;
  // Sized for the most threads this process may use; entries for every thread count up to it are covered.
  const int threads = max_threads();
  size_t bytes = 0;
  try {
    bytes = describe(s, threads).scratchpad_desc().get_size();
  } catch (const dnnl::error&) {
    return 0;
  }
  std::lock_guard lock(registry_mutex());
  for (int t = 1; t <= threads; ++t) {
    Entry& e = registry()[Key{s, t}];
    e.planned_scratch = std::max(e.planned_scratch, bytes);
  }
  return bytes;
#else
  (void)s;
  return 0;
#endif
}

void gemm(const GemmShape& s, const float* a, const float* b, const float* bias, const float* y, float* c,
          void* workspace, const SumsOut* sums) {
  if (s.m == 0 || s.n == 0) {
    if (sums) std::fill(sums->out, sums->out + s.n, 0.0f);
    return;
  }
  if (s.k == 0) {  // an empty sum: 0, then the epilogue
    std::memset(c, 0, sizeof(float) * static_cast<size_t>(s.m * s.n));
    if (s.epilogue != Epilogue::none) epilogue_pass(s, bias, y, c, sums);
    return;
  }
  const Key key{s, omp_get_max_threads()};
  Entry* entry;
  {
    std::lock_guard lock(registry_mutex());
    if (!forced_engine()) load_cache();
    entry = &registry()[key];  // std::map: stable address
    // A shape new to this process: another process sharing the cache (a CLI child, a replica, a test) may have
    // measured it since this one started; take its choice, so both compute the same bits.
    if (!entry->decided && !forced_engine()) read_cache();
    if (!entry->decided) decide(key, *entry, a, b, bias, y, c, workspace);
#ifdef TK_HAVE_ONEDNN
    if (entry->engine == GemmEngine::onednn && !entry->dnnl) {  // restored choice: build it now
      entry->dnnl = std::make_unique<Dnnl>(s);
      if (entry->dnnl->scratch > entry->planned_scratch) entry->dnnl.reset(), entry->engine = GemmEngine::openblas;
    }
#endif
  }
  run_engine(entry->engine, *entry, s, a, b, bias, y, c, workspace, sums);
}

void apply_epilogue(const GemmShape& s, const float* bias, const float* y, float* c) {
  if (s.epilogue != Epilogue::none) epilogue_pass(s, bias, y, c);
}

GemmShape gemm_shape(const graph::Graph& g, const graph::Node& n) {
  const Shape& sa = g[n.inputs[0]].shape;
  GemmShape s{n.shape[0],      n.shape[1],      n.attrs.trans_a ? sa[0] : sa[1],
              n.attrs.trans_a, n.attrs.trans_b, Epilogue::none};
  if (n.op == graph::Op::FusedMatMul)
    s.epilogue = n.attrs.epilogue == graph::Op::Relu       ? Epilogue::bias_relu
                 : n.attrs.epilogue == graph::Op::ReluGrad ? Epilogue::relu_grad
                                                           : Epilogue::bias;
  return s;
}

namespace {
// The listed entries `keep` accepts, as gemm_choices' text, in the registry's order.
template <typename Keep>
std::string choices_where(Keep keep) {
  std::lock_guard lock(registry_mutex());
  std::string out;
  for (const auto& [key, e] : registry())
    if (e.listed && keep(key, e))
      out += describe_key(key) + "=" + std::string(kEngineNames[static_cast<int>(e.engine)]) + ";";
  return out;
}
}  // namespace

std::string gemm_choices(const std::vector<GemmShape>& shapes) {
  return shapes.empty() ? choices_where([](const Key&, const Entry&) { return true; }) : gemm_choices_of(shapes);
}

std::string gemm_choices_of(const std::vector<GemmShape>& shapes) {
  return choices_where([&](const Key& key, const Entry& e) {
    return e.restored || std::find(shapes.begin(), shapes.end(), key.s) != shapes.end();
  });
}

void set_gemm_choices(const std::string& text) {
  std::lock_guard lock(registry_mutex());
  if (!forced_engine()) load_cache();
  apply_choices(text, /*listed=*/true, /*override=*/true, /*restored=*/true);
}

}  // namespace tk::cpu
