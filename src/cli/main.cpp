// trainkit command line: `trainkit fit` trains on Fashion-MNIST by default.
// Exit status: 0 success; 1 an error while running (bad data or values, out of memory); 2 a wrong command line
// (cli/usage.h); 3 `trainkit plan`: the batch does not fit; 70 an internal error. Every error is one
// "trainkit: error: ..." line on stderr.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/usage.h"
#include "runtime/cuda_device.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/distribute.h"

int main(int argc, char** argv) {
  // The backends this build has, not every backend trainkit has code for.
  CLI::App app{std::string("trainkit: Keras-style training in C++; backends in this build: cpu") +
                   (tk::runtime::cuda_backend_compiled() ? ", cuda (NVIDIA GPUs; `trainkit devices` lists them)"
                                                         : " (built without CUDA: -DTK_CUDA=ON adds NVIDIA GPUs)"),
               "trainkit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "trainkit 0.1.0");
  tk::cli::FitArgs fit_args;
  tk::cli::add_fit_command(app, fit_args);
  tk::cli::PlanArgs plan_args;
  tk::cli::add_plan_command(app, plan_args);
  tk::cli::add_devices_command(app);
  tk::cli::SmiArgs smi_args;
  tk::cli::add_smi_command(app, smi_args);
  tk::cli::SummaryArgs summary_args;
  tk::cli::add_summary_command(app, summary_args);
  tk::cli::EvaluateArgs evaluate_args;
  tk::cli::add_evaluate_command(app, evaluate_args);
  tk::cli::PredictArgs predict_args;
  tk::cli::add_predict_command(app, predict_args);
  tk::cli::ExportArgs export_args;
  tk::cli::add_export_command(app, export_args);
  tk::cli::add_jobs_command(app);
  tk::cli::EnvArgs env_args;
  tk::cli::add_env_command(app, env_args);
  tk::cli::RunArgs run_args;
  tk::cli::add_run_command(app, run_args);
  if (const std::string unknown = tk::cli::unknown_command(app, argc, argv); !unknown.empty())
    return tk::cli::usage_error(app.get_name(), unknown);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return tk::cli::report_parse_error(app, e);
  }
  try {
    if (app.got_subcommand("fit") && fit_args.isolate) return tk::cli::run_isolated(argc, argv);
    if (!app.got_subcommand("run")) tk::cli::maybe_test_fault();  // in the child, never in the parent that watches
    if (app.got_subcommand("fit")) return tk::cli::run_fit(fit_args);
    if (app.got_subcommand("plan")) return tk::cli::run_plan(plan_args);
    if (app.got_subcommand("devices")) return tk::cli::run_devices();
    if (app.got_subcommand("smi")) return tk::cli::run_smi(smi_args);
    if (app.got_subcommand("summary")) return tk::cli::run_summary(summary_args);
    if (app.got_subcommand("evaluate")) return tk::cli::run_evaluate(evaluate_args);
    if (app.got_subcommand("predict")) return tk::cli::run_predict(predict_args);
    if (app.got_subcommand("export")) return tk::cli::run_export(export_args);
    if (app.got_subcommand("jobs")) return tk::cli::run_jobs();
    if (app.got_subcommand("env")) return tk::cli::run_env(env_args);
    if (app.got_subcommand("run")) return tk::cli::run_run(run_args);
  } catch (const tk::Error& e) {
    std::fprintf(stderr, "trainkit: error: %s\n", e.what());
    tk::distribute::MultiWorkerMirroredStrategy::end_job_after_error(tk::cli::kExitError);  // under mpirun: every rank
    return tk::cli::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainkit: error: internal error: %s (please report it)\n", e.what());
    tk::distribute::MultiWorkerMirroredStrategy::end_job_after_error(tk::cli::kExitInternal);
    return tk::cli::kExitInternal;
  }
  return 0;
}
