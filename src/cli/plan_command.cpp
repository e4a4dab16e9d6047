// trainkit plan: the memory a training step will take, and the largest batch that fits the budget.
#include <cstdio>

#include "cli/commands.h"
#include "cli/usage.h"
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
}

int run_plan(const PlanArgs& a) {
  if (a.batch_size <= 0)
    throw InvalidArgument("--batch-size must be a positive integer, got " + std::to_string(a.batch_size));
  std::unique_ptr<Sequential> model = make_model(a.model, Shape(a.input_shape));
  model->compile(optimizers::get(a.optimizer), losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 {"accuracy"});
  const MemoryPlan plan = model->memory_plan(a.batch_size);
  std::fputs(plan.to_string().c_str(), stdout);
  const MemoryInfo m = config::get_memory_info();
  // What the step may use: the budget with a 5% margin, less what others hold (this model's weights are
  // already allocated and are part of the plan).
  const size_t others = m.current > plan.weights ? m.current - plan.weights : 0;
  const size_t usable = static_cast<size_t>(0.95 * double(m.limit));
  const size_t available = usable > others ? usable - others : 0;
  const int64_t best = model->largest_batch_that_fits(available);
  std::printf("Budget %s on %s (5%% margin: %s usable, %s held by others). ", config::format_bytes(m.limit).c_str(),
              Device::cpu().to_string().c_str(), config::format_bytes(usable).c_str(),
              config::format_bytes(others).c_str());
  if (plan.total <= available)
    std::printf("Batch %lld fits; ", static_cast<long long>(a.batch_size));
  else
    std::printf("Batch %lld does NOT fit; ", static_cast<long long>(a.batch_size));
  std::printf("the largest batch that fits is %lld.\n", static_cast<long long>(best));
  return plan.total <= available ? 0 : 3;
}

}  // namespace tk::cli
