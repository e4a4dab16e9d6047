// trainkit plan: the memory a training step will take, and the largest batch that fits the budget.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "cli/commands.h"
#include "cli/usage.h"
#include "graph/kernel.h"
#include "runtime/cuda_device.h"
#include "trainkit/io/atomic_file.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

namespace {

// What fit would train: a model file's compiled optimizer and loss (its compile_config, as `trainkit fit --model
// f.keras` keeps them), unless --optimizer names another (then that one, the file's loss kept: "what if I used
// adam?"); a layer spec or an uncompiled file: --optimizer (adam) and sparse categorical crossentropy on logits.
// The optimizer's slots are planned, never allocated.
void compile_for_plan(Model& model, const PlanArgs& a) {
  const bool file_compiled = model.optimizer() != nullptr;
  if (file_compiled && !a.optimizer_given) {
    model.compile(model.optimizer(), model.losses(), model.metrics());  // again, in the strategy's scope if any
    return;
  }
  model.compile(
      optimizers::get(a.optimizer),
      file_compiled ? model.losses() : std::vector<Loss>{losses::SparseCategoricalCrossentropy({.from_logits = true})},
      file_compiled ? model.metrics() : std::vector<Metric>{"accuracy"});
}

}  // namespace

void add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* plan = app.add_subcommand(
      "plan", "Print the memory plan of one training step (per layer) and the largest batch size that fits the budget");
  plan->add_option("-m,--model", a.model, "\"cnn\" or layers after the input, as for `trainkit fit`")
      ->capture_default_str();
  plan->add_option("-b,--batch-size", a.batch_size,
                   "Samples per step, or \"auto\": the plan of the largest batch that fits the budget (what `trainkit "
                   "fit --batch-size auto` trains with)")
      ->check(choice_of([](const std::string& v) {
        char* end = nullptr;
        if (v != "auto" && (std::strtoll(v.c_str(), &end, 10), v.empty() || *end != '\0'))
          throw InvalidArgument("'" + v + "' is not an integer (or \"auto\")");
      }))
      ->capture_default_str();
  plan->add_option("-o,--optimizer", a.optimizer,
                   optimizer_names() + " (slots per weight differ; a model file's own compiled optimizer otherwise)")
      ->check(choice_of([](const std::string& name) { optimizers::get(name); }))
      ->each([&a](const std::string&) { a.optimizer_given = true; })
      ->capture_default_str();
  plan->add_option("--input-shape", a.input_shape, "Per-sample input shape, e.g. 28 28")->capture_default_str();
  plan->add_option("--replicas", a.replicas,
                   "Data parallel over N devices (MirroredStrategy): the plan of one replica, which takes its share "
                   "of the global --batch-size and holds its own copy of the weights and optimizer state. On the "
                   "cpu the budget is split evenly between N logical devices")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  add_run_options(plan, a.run);
  plan->add_option("--gpu", a.gpu,
                   "Plan for this GPU on a machine without it (as --device cuda): A100-40GB, A100-80GB, H100-80GB, "
                   "H200, L4, L40S, A10G, T4, V100-16GB, V100-32GB, RTX-3090, RTX-4090. Its memory is the budget "
                   "unless --memory-limit says otherwise");
  plan->add_option("--svg", a.svg,
                   "Also draw the plan as an SVG picture: every planned value as a box at its arena offset over its "
                   "lifetime, colored by layer, the peak marked");
}

namespace {

// The plan of one training step of `rows`, printed per layer (and drawn to `svg` when given).
MemoryPlan print_plan(Model& model, int64_t rows, const std::string& svg) {
  const MemoryPlan plan = model.memory_plan(rows);
  std::fputs(plan.to_string().c_str(), stdout);
  if (!svg.empty()) {
    io::write_file_atomic(svg, plan.svg());
    std::printf("Wrote the plan's picture to %s (%zu planned values)\n", svg.c_str(), plan.values.size());
  }
  return plan;
}

// --batch-size auto: the batch the plan is of (fit(batch_size = kAutoBatchSize) chooses by the same rule).
int64_t announce_auto(int64_t best) {
  if (best < 1)
    throw OutOfMemoryError(
        "--batch-size auto: not even a batch of 1 fits the budget (the plan of batch 1 follows "
        "with `--batch-size 1`); raise --memory-limit, or try --dtype-policy mixed_bfloat16");
  std::printf("--batch-size auto: the largest batch that fits is %lld; the plan below is of it.\n",
              static_cast<long long>(best));
  return best;
}

// GPUs by the memory their names give (the driver keeps a few hundred MiB of it: pass --memory-limit for a tighter
// budget).
struct Card {
  const char* name;
  size_t gib;
};
constexpr Card kCards[] = {{"A100-40GB", 40}, {"A100-80GB", 80}, {"H100-80GB", 80}, {"H200", 141},
                           {"L4", 24},        {"L40S", 48},      {"A10G", 24},      {"T4", 16},
                           {"V100-16GB", 16}, {"V100-32GB", 32}, {"RTX-3090", 24},  {"RTX-4090", 24}};

// `trainkit plan --device cuda` without a CUDA backend here (no GPU, or a build without one): the programs traced and
// planned for the CUDA device, under its memory, so a job can be sized on a laptop before it is queued.
int run_plan_absent_gpu(const PlanArgs& a, int64_t batch) {
  if (a.replicas > 1)
    throw Unsupported("trainkit plan --replicas " + std::to_string(a.replicas) +
                      " over CUDA devices: not built yet (plan one GPU, or --device cpu replicas)");
  const bool named = a.run.device.rfind("cuda", 0) == 0 || a.run.device.rfind("gpu", 0) == 0;
  const Device device = named ? parse_device(a.run.device) : Device::cuda(0);
  require_dtype_policy(a.run.dtype_policy);
  mixed_precision::set_global_policy(a.run.dtype_policy);
  size_t budget = 0;
  std::string card;
  if (!a.gpu.empty()) {
    std::string names;
    for (const Card& c : kCards) {
      names += std::string(names.empty() ? "" : ", ") + c.name;
      std::string want = a.gpu, have = c.name;
      for (char& ch : want) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (want == have) budget = c.gib << 30, card = c.name;
    }
    if (card.empty())
      throw InvalidArgument("--gpu " + a.gpu + ": not a card trainkit knows (" + names +
                            "); give its memory instead: --device cuda --memory-limit 24GiB");
  }
  if (!a.run.memory_limit.empty()) budget = parse_memory_limit(a.run.memory_limit);
  if (budget == 0)
    throw InvalidArgument("--device " + device.to_string() +
                          ": this trainkit has no CUDA device to use here, so the plan needs the GPU's memory: "
                          "--memory-limit 24GiB, or --gpu NAME (`trainkit plan --help` lists the cards)");
  std::unique_ptr<Model> model =
      is_model_file(a.model) ? models::load_model_for_planning(a.model) : make_model(a.model, Shape(a.input_shape));
  model->set_dtype_policy(a.run.dtype_policy);
  model->plan_for_absent_device(device, budget);
  compile_for_plan(*model, a);
  graph::ensure_backends_registered();  // the kernel table fills on first use; ask it only once it is filled
  const bool kernels = graph::registered_workspace(DeviceKind::cuda, graph::Op::MatMul) != nullptr;
  const std::string card_note = card.empty() ? "" : " (" + card + ")";
  std::printf(
      "Planning for %s%s with a %s budget, without one here: the programs are traced and planned as the "
      "CUDA backend builds them; nothing runs.\n",
      device.to_string().c_str(), card_note.c_str(), config::format_bytes(budget).c_str());
  std::puts(kernels
                ? "Kernel workspaces (cuBLASLt's, one per GEMM; a convolution's unrolled images, the bound cuDNN "
                  "is chosen under) are in the plan's workspace line."
                : "This build has no CUDA kernels (built with TK_CUDA=OFF): kernel workspaces are not in the plan.");
  const size_t available = model->memory_available_for_training();
  const int64_t best = model->largest_batch_that_fits(available);
  if (batch == kAutoBatchSize) batch = announce_auto(best);
  const MemoryPlan plan = print_plan(*model, batch, a.svg);
  std::printf(
      "Budget %s on %s (planned, not on this machine), %s of it available to a training step (a 5%% margin "
      "stays free). Batch %lld %s; the largest batch that fits is %s%lld.\n",
      config::format_bytes(budget).c_str(), device.to_string().c_str(), config::format_bytes(available).c_str(),
      static_cast<long long>(batch), plan.total <= available ? "fits" : "does NOT fit",
      best == int64_t{1} << 16 ? "at least (the search stops there) " : "", static_cast<long long>(best));
  return plan.total <= available ? 0 : 3;
}

}  // namespace

int run_plan(const PlanArgs& a) {
  int64_t batch = parse_batch_option("--batch-size", a.batch_size, false);
  if (batch != kAutoBatchSize && batch < a.replicas)
    throw InvalidArgument("--batch-size " + std::to_string(batch) + " is smaller than --replicas " +
                          std::to_string(a.replicas) + ": every replica needs at least one row of the global batch");
  const bool cuda_wanted = !a.gpu.empty() || a.run.device.rfind("cuda", 0) == 0 || a.run.device.rfind("gpu", 0) == 0;
  // No GPU here: plan the GPU job from its card's memory (a GPU machine plans on the device itself).
  if (cuda_wanted && (!a.gpu.empty() || runtime::cuda_devices().devices.empty())) return run_plan_absent_gpu(a, batch);
  const Device device = apply_run_options(a.run);
  std::optional<distribute::MirroredStrategy> strategy;
  if (a.replicas > 1) strategy.emplace(replicas_over(device, a.replicas, "trainkit plan", a.run.memory_limit));
  // A model file: its config alone (planning reads no weights and allocates no optimizer state or arena).
  std::unique_ptr<Model> model =
      is_model_file(a.model) ? models::load_model_for_planning(a.model) : make_model(a.model, Shape(a.input_shape));
  configure_model(*model, a.run, device);
  distribute::in_scope(strategy ? &*strategy : nullptr, [&] { compile_for_plan(*model, a); });
  // What a step may use, by the rule fit(batch_size = kAutoBatchSize) uses: the budget with a margin, less
  // what others hold (this model's weights count as available: the plan includes them).
  const size_t available = model->memory_available_for_training();
  const int64_t best = model->largest_batch_that_fits(available);
  if (batch == kAutoBatchSize) batch = announce_auto(best) * a.replicas;
  // Under data parallel, replica 0 takes the largest share of the global batch (the first batch % N one row more).
  const int64_t rows = (batch + a.replicas - 1) / a.replicas;
  if (strategy)
    std::printf(
        "Data parallel: %s. The global batch of %lld is split %d ways; replica 0 takes the largest share, %lld "
        "rows, and holds its own copy of the weights, gradients and optimizer state under its device's budget. "
        "The plan below is one replica's.\n",
        strategy->describe().c_str(), static_cast<long long>(batch), a.replicas, static_cast<long long>(rows));
  const MemoryPlan plan = print_plan(*model, rows, a.svg);
  const MemoryInfo m = config::get_memory_info(model->device());
  std::printf(
      "Budget %s on %s, %s of it available to a training step (a 5%% margin and what others hold stay "
      "free). ",
      config::format_bytes(m.limit).c_str(), model->device().to_string().c_str(),
      config::format_bytes(available).c_str());
  const char* what = strategy ? "A replica's share of" : "Batch";
  std::printf(plan.total <= available ? "%s %lld fits; " : "%s %lld does NOT fit; ", what,
              static_cast<long long>(rows));
  if (strategy)
    std::printf("the largest share that fits is %lld rows per replica, a global batch of %lld.\n",
                static_cast<long long>(best), static_cast<long long>(best * a.replicas));
  else
    std::printf("the largest batch that fits is %lld.\n", static_cast<long long>(best));
  return plan.total <= available ? 0 : 3;
}

}  // namespace tk::cli
