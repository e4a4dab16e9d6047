// CLI subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/lease_options.h"
#include "cli/run_options.h"
#include "trainkit/nn/model.h"

namespace tk::cli {

struct FitArgs {
  std::string model = "dense:256:relu,dense:128:relu,dense:10";
  int epochs = 10;
  std::string batch_size = "128";      // or "auto"
  std::string micro_batch_size = "0";  // 0: off, N, or "auto"
  float learning_rate = 1e-3f;
  std::string optimizer = "adam";
  uint64_t seed = 42;
  std::string data_dir;  // default: tk::data::default_fashion_mnist_dir()
  std::string train_images, train_labels, test_images, test_labels;
  float validation_split = 0.0f;
  // --data: a file in any supported format instead of the IDX options (cli/data_source.h)
  std::string data, validation_data, format = "auto", x, y, validation_y;
  int64_t shuffle_buffer = 10000;
  int verbose = -1;
  bool summary = true;
  RunOptions run;        // --device, --dtype-policy, --memory-limit
  bool isolate = false;  // --isolate: train in a child process (run_command.cpp)
};

void add_fit_command(CLI::App& app, FitArgs& args);
int run_fit(const FitArgs& args);

struct PlanArgs {
  std::string model = "dense:256:relu,dense:128:relu,dense:10";
  int64_t batch_size = 128;
  std::string optimizer = "adam";
  std::vector<int64_t> input_shape = {28, 28};
  RunOptions run;
};
void add_plan_command(CLI::App& app, PlanArgs& args);
int run_plan(const PlanArgs& args);

// `trainkit devices` and `trainkit smi` (devices_command.cpp). Without a GPU both say why and exit 0.
void add_devices_command(CLI::App& app);
int run_devices();
struct SmiArgs {
  double watch = 0.0;  // seconds between reports; 0: one report
  int count = 0;       // with watch: stop after this many reports (0: until interrupted)
};
void add_smi_command(CLI::App& app, SmiArgs& args);
int run_smi(const SmiArgs& args);
// `trainkit jobs` (jobs_command.cpp): the lease ledger's holders and waiters.
void add_jobs_command(CLI::App& app);
int run_jobs();
// `trainkit run [options] -- PROGRAM ...` and `fit --isolate` (run_command.cpp).
struct RunArgs {
  std::string device = "auto", memory_limit;
  LeaseOptions lease;
  std::vector<std::string> command;
};
void add_run_command(CLI::App& app, RunArgs& args);
int run_run(const RunArgs& args);
int run_isolated(int argc, char** argv);  // this command line again, in a child, without --isolate
void maybe_test_fault();                  // TK_TEST_FAULT=segfault|abort (isolation tests only)

// The model a --model value names: "cnn", or a spec of layers after the input.
// "auto" -> tk::kAutoBatchSize; otherwise a positive integer (or >= 0 when zero_ok). Names the option.
int64_t parse_batch_option(const std::string& option, const std::string& value, bool zero_ok);

// scale != 1: a Rescaling(scale) after the input (uint8 pixels: 1/255, applied as each batch is staged).
std::unique_ptr<Sequential> make_model(const std::string& model, const Shape& sample_shape, float scale = 1.0f);

}  // namespace tk::cli
