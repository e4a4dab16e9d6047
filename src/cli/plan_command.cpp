// trainkit plan: the memory a training step will take, and the largest batch that fits the budget.
#include <cstdio>

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
  add_run_options(plan, a.run);
  plan->add_option("--svg", a.svg,
                   "Also draw the plan as an SVG picture: every planned value as a box at its arena offset over its "
                   "lifetime, colored by layer, the peak marked");
}

int run_plan(const PlanArgs& a) {
  if (a.batch_size <= 0)
    throw InvalidArgument("--batch-size must be a positive integer, got " + std::to_string(a.batch_size));
  const Device device = apply_run_options(a.run);
  std::unique_ptr<Model> model = make_model(a.model, Shape(a.input_shape));
  configure_model(*model, a.run, device);
  model->compile(optimizers::get(a.optimizer), losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 {"accuracy"});
  const MemoryPlan plan = model->memory_plan(a.batch_size);
  std::fputs(plan.to_string().c_str(), stdout);
  if (!a.svg.empty()) {
    io::write_file_atomic(a.svg, plan.svg());
    std::printf("Wrote the plan's picture to %s (%zu planned values)\n", a.svg.c_str(), plan.values.size());
  }
  // What a step may use, by the rule fit(batch_size = kAutoBatchSize) uses: the budget with a margin, less
  // what others hold (this model's weights count as available: the plan includes them).
  const size_t available = model->memory_available_for_training();
  const int64_t best = model->largest_batch_that_fits(available);
  const MemoryInfo m = config::get_memory_info();
  std::printf(
      "Budget %s on %s, %s of it available to a training step (a 5%% margin and what others hold stay "
      "free). ",
      config::format_bytes(m.limit).c_str(), Device::cpu().to_string().c_str(),
      config::format_bytes(available).c_str());
  if (plan.total <= available)
    std::printf("Batch %lld fits; ", static_cast<long long>(a.batch_size));
  else
    std::printf("Batch %lld does NOT fit; ", static_cast<long long>(a.batch_size));
  std::printf("the largest batch that fits is %lld.\n", static_cast<long long>(best));
  return plan.total <= available ? 0 : 3;
}

}  // namespace tk::cli
