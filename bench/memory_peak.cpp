// Peak training memory of two MLPs (Adam, sparse softmax cross-entropy from logits, batch 128), as
// trainkit plans it, as its allocator measures it and as the kernel sees it (RSS), next to the
// theoretical minimum. Prints one JSON line per model variant (bench/memory_peak.sh runs it beside
// PyTorch and prints a table).
//
//   ./build/bench/tk_bench_memory                     # every variant, each in a fresh child process
//   ./build/bench/tk_bench_memory --variant deep_mlp  # one of: mlp, deep_mlp, deep_mlp_remat
//
// Models: mlp      784-256-128-10 (relu, relu, logits)
//         deep_mlp 784 -> 40 x Dense(512, relu) -> 10 (logits); deep_mlp_remat: the same with
//                  model.rematerialization = tk::Remat::on (set before compile)
//
// Theoretical minimum = 4 B x 4 x params (weights + gradients + 2 Adam slots)
//                     + 4 B x batch x (784 + sum of layer widths) (the input batch + every layer's output).
// It keeps every activation, so a rematerializing plan may go below it.
//
// Measurement, per variant in its own process (so that one variant's freed memory, kept by glibc or by
// trainkit's allocator regions, cannot hide the next one's):
//   1. x (128,784) f32 and y (128,) i32 are created first (random, Fashion-MNIST-like shapes);
//   2. baseline = tk::config::get_memory_info().current; reset_peak_memory();
//      "5" -> /proc/self/clear_refs (VmHWM := VmRSS); rss_before = VmRSS;
//   3. the model is built (weights are allocated here), compiled and train_on_batch({x},{y}) runs 3 times;
//   4. measured_bytes = get_memory_info().peak - baseline  (live bytes in trainkit's device allocator:
//      weights, optimizer slots, the step's arena and workspace, anything else charged to the budget);
//      rss_delta_bytes = VmHWM - rss_before (includes the 2 MiB region granularity of trainkit's
//      allocator, heap used for graphs/programs, thread stacks and OpenBLAS buffers first touched here);
//   5. plan_bytes = model.memory_plan(128).total (computed from the compiled program, allocates nothing).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace {

constexpr int64_t kBatch = 128;
constexpr int64_t kFeatures = 784;
constexpr int64_t kClasses = 10;
constexpr int kSteps = 3;

// "VmRSS:    12345 kB" -> bytes; 0 if absent.
size_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      std::istringstream is(line.substr(n + 1));
      size_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

bool reset_hwm() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

struct Variant {
  const char* name;
  std::vector<int64_t> hidden;  // relu layers; a final Dense(10) gives the logits
  bool remat;
};

const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      {"mlp", {256, 128}, false},
      {"deep_mlp", std::vector<int64_t>(40, 512), false},
      {"deep_mlp_remat", std::vector<int64_t>(40, 512), true},
  };
  return v;
}

struct Theory {
  int64_t params = 0, activation_floats = 0;
  size_t bytes = 0;
};

Theory theoretical_min(const Variant& v) {
  Theory t;
  int64_t in = kFeatures, widths = 0;
  std::vector<int64_t> units = v.hidden;
  units.push_back(kClasses);
  for (int64_t u : units) {
    t.params += in * u + u;
    widths += u;
    in = u;
  }
  t.activation_floats = kBatch * (kFeatures + widths);
  t.bytes = 4 * size_t(4 * t.params) + 4 * size_t(t.activation_floats);
  return t;
}

int run_variant(const Variant& v) {
  tk::utils::set_random_seed(1);
  // 1. The batch first.
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, kClasses - 1);
  std::vector<float> xs(static_cast<size_t>(kBatch * kFeatures));
  std::vector<int32_t> ys(static_cast<size_t>(kBatch));
  for (float& p : xs) p = pixel(rng);
  for (int32_t& l : ys) l = label(rng);
  tk::Tensor x = tk::Tensor::from_vector<float>({kBatch, kFeatures}, xs);
  tk::Tensor y = tk::Tensor::from_vector<int32_t>({kBatch}, ys);
  std::vector<float>().swap(xs);
  std::vector<int32_t>().swap(ys);

  // 2. Baselines.
  const size_t baseline = tk::config::get_memory_info().current;
  tk::config::reset_peak_memory();
  const bool hwm_ok = reset_hwm();
  const size_t rss_before = proc_status_bytes("VmRSS");

  // 3. Build, compile, train.
  std::vector<tk::LayerPtr> layers = {tk::layers::Input({kFeatures})};
  for (int64_t u : v.hidden) layers.push_back(tk::layers::Dense(u, "relu"));
  layers.push_back(tk::layers::Dense(kClasses));
  tk::Sequential model(layers);
  model.rematerialization = v.remat ? tk::Remat::on : tk::Remat::off;
  model.compile(tk::optimizers::Adam() /* learning_rate 1e-3 */,
                tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  float loss = 0;
  for (int s = 0; s < kSteps; ++s) {
    const tk::Logs& logs = model.train_on_batch({x}, {y});
    if (logs.contains("loss")) loss = float(logs.get("loss"));
  }

  // 4. Peaks, read before anything else runs.
  const tk::MemoryInfo after = tk::config::get_memory_info();
  const size_t hwm = proc_status_bytes("VmHWM");
  const size_t measured = after.peak - baseline;
  const size_t rss_delta = hwm_ok && hwm > rss_before ? hwm - rss_before : 0;

  // 5. The plan.
  const tk::MemoryPlan plan = model.memory_plan(kBatch);
  const Theory th = theoretical_min(v);
  std::string text = plan.to_string();
  const size_t totals = text.find("Totals\n");
  std::fprintf(stderr, "[%s] params=%lld, %s%s", v.name, static_cast<long long>(model.count_params()),
               plan.rematerialized ? "rematerialized, " : "",
               totals == std::string::npos ? text.c_str() : text.substr(totals).c_str());
  std::fprintf(stderr, "[%s] allocator after %d steps: current %s, peak %s, reserved %s (baseline %s)\n", v.name,
               kSteps, tk::config::format_bytes(after.current).c_str(), tk::config::format_bytes(after.peak).c_str(),
               tk::config::format_bytes(after.reserved).c_str(), tk::config::format_bytes(baseline).c_str());

  std::printf(
      "{\"runtime\":\"trainkit\",\"model\":\"%s\",\"params\":%lld,\"batch_size\":%lld,\"steps\":%d,"
      "\"loss\":%.4f,\"plan_bytes\":%zu,\"plan\":{\"weights\":%zu,\"optimizer_state\":%zu,\"arena\":%zu,"
      "\"gradients\":%zu,\"workspace\":%zu,\"unshared\":%zu,\"file_staging\":%zu,\"rematerialized\":%s,"
      "\"recomputed_ops\":%d},"
      "\"measured_bytes\":%zu,\"reserved_bytes_after\":%zu,\"rss_delta_bytes\":%s,"
      "\"theoretical_min_bytes\":%zu,"
      "\"theoretical_min_formula\":\"4*(4*%lld params) + 4*(%lld*(784+sum widths) = %lld floats)\"}\n",
      v.name, static_cast<long long>(th.params), static_cast<long long>(kBatch), kSteps, loss, plan.total, plan.weights,
      plan.optimizer_state, plan.arena, plan.gradients, plan.workspace, plan.unshared, plan.file_staging,
      plan.rematerialized ? "true" : "false", plan.recomputed_ops, measured, after.reserved,
      hwm_ok ? std::to_string(rss_delta).c_str() : "null", th.bytes, static_cast<long long>(th.params),
      static_cast<long long>(kBatch), static_cast<long long>(th.activation_floats));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string only;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--variant")) only = argv[++i];
  if (!only.empty()) {
    for (const Variant& v : variants())
      if (only == v.name) return run_variant(v);
    std::fprintf(stderr, "unknown variant %s (mlp, deep_mlp, deep_mlp_remat)\n", only.c_str());
    return 2;
  }
  // Every variant in a fresh process.
  std::fprintf(stderr,
               "theoretical min = 4 B x (4 x params: weights + gradients + 2 Adam slots) "
               "+ 4 B x batch x (784 + sum of layer widths: input + every layer's output)\n");
  int rc = 0;
  for (const Variant& v : variants()) {
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "--variant", v.name, static_cast<char*>(nullptr));
      std::perror("execl");
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tk_bench_memory: %s\n", e.what());
  return 1;
}
