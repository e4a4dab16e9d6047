// trainkit plan: the memory a training step will take, and the largest batch that fits the budget.
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "cli/usage.h"
#include "trainkit/io/atomic_file.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

void add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* plan = app.add_subcommand(
      "plan", "Print the memory plan of one training step (per layer) and the largest batch size that fits the budget");
  plan->add_option("-m,--model", a.model, "\"cnn\" or layers after the input, as for `trainkit fit`")
      ->capture_default_str();
  plan->add_option("-b,--batch-size", a.batch_size, "Samples per step")->capture_default_str();
  plan->add_option("-o,--optimizer", a.optimizer, "sgd, adam, adamw or rmsprop (slots per weight differ)")
      ->check(choice_of([](const std::string& name) { optimizers::get(name); }))
      ->capture_default_str();
  plan->add_option("--input-shape", a.input_shape, "Per-sample input shape, e.g. 28 28")->capture_default_str();
  plan->add_option("--replicas", a.replicas,
                   "Data parallel over N devices (MirroredStrategy): the plan of one replica, which takes its share "
                   "of the global --batch-size and holds its own copy of the weights and optimizer state. On the "
                   "cpu the budget is split evenly between N logical devices")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  add_run_options(plan, a.run);
  plan->add_option("--svg", a.svg,
                   "Also draw the plan as an SVG picture: every planned value as a box at its arena offset over its "
                   "lifetime, colored by layer, the peak marked");
}

namespace {

// --replicas N: the device split into N logical devices with equal shares of its budget, and a MirroredStrategy
// over them (what a program that calls set_logical_device_configuration and MirroredStrategy runs).
distribute::MirroredStrategy replicas_over(Device device, int replicas) {
  if (device.kind != DeviceKind::cpu)
    throw Unsupported("trainkit plan --replicas: data parallel over " + device.to_string() +
                      " devices needs the CUDA backend, which is not built yet; plan over the cpu's logical devices "
                      "(--device cpu)");
  const size_t share = config::get_memory_info(device).limit / static_cast<size_t>(replicas);
  config::set_logical_device_configuration(Device::cpu(), std::vector<size_t>(static_cast<size_t>(replicas), share));
  std::vector<Device> devices;
  for (int r = 0; r < replicas; ++r) devices.push_back(Device::cpu(r));
  return distribute::MirroredStrategy(devices);
}

}  // namespace

int run_plan(const PlanArgs& a) {
  if (a.batch_size <= 0)
    throw InvalidArgument("--batch-size must be a positive integer, got " + std::to_string(a.batch_size));
  if (a.batch_size < a.replicas)
    throw InvalidArgument("--batch-size " + std::to_string(a.batch_size) + " is smaller than --replicas " +
                          std::to_string(a.replicas) + ": every replica needs at least one row of the global batch");
  const Device device = apply_run_options(a.run);
  std::optional<distribute::MirroredStrategy> strategy;
  if (a.replicas > 1) strategy.emplace(replicas_over(device, a.replicas));
  std::unique_ptr<Model> model = make_model(a.model, Shape(a.input_shape));
  configure_model(*model, a.run, device);
  distribute::in_scope(strategy ? &*strategy : nullptr, [&] {
    model->compile(optimizers::get(a.optimizer), losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   {"accuracy"});
  });
  // Under data parallel, replica 0 takes the largest share of the global batch (the first batch % N one row more).
  const int64_t rows = (a.batch_size + a.replicas - 1) / a.replicas;
  if (strategy)
    std::printf(
        "Data parallel: %s. The global batch of %lld is split %d ways; replica 0 takes the largest share, %lld "
        "rows, and holds its own copy of the weights, gradients and optimizer state under its device's budget. "
        "The plan below is one replica's.\n",
        strategy->describe().c_str(), static_cast<long long>(a.batch_size), a.replicas, static_cast<long long>(rows));
  const MemoryPlan plan = model->memory_plan(rows);
  std::fputs(plan.to_string().c_str(), stdout);
  if (!a.svg.empty()) {
    io::write_file_atomic(a.svg, plan.svg());
    std::printf("Wrote the plan's picture to %s (%zu planned values)\n", a.svg.c_str(), plan.values.size());
  }
  // What a step may use, by the rule fit(batch_size = kAutoBatchSize) uses: the budget with a margin, less
  // what others hold (this model's weights count as available: the plan includes them).
  const size_t available = model->memory_available_for_training();
  const int64_t best = model->largest_batch_that_fits(available);
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
