// CLI subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/callback_options.h"
#include "cli/lease_options.h"
#include "cli/run_options.h"
#include "trainkit/nn/model.h"

namespace tk::cli {

struct FitArgs {
  std::string model = "dense:256:relu,dense:128:relu,dense:10";
  int epochs = 10;
  int initial_epoch = 0;               // --initial-epoch: the epoch to start at (Keras' initial_epoch; a resumed run)
  int64_t steps_per_epoch = 0;         // --steps-per-epoch: 0 one pass over the data per epoch
  int64_t validation_steps = 0;        // --validation-steps: 0 one pass over the validation data
  std::string batch_size = "128";      // or "auto"
  std::string micro_batch_size = "0";  // 0: off, N, or "auto"
  std::optional<float> learning_rate;  // unset: the optimizer's Keras default (0.001; SGD 0.01)
  std::string optimizer = "adam";
  bool optimizer_given = false;  // -o/--optimizer on the command line (a model file's optimizer is checked against it)
  std::string loss;              // --loss: a Keras loss name (empty: sparse_categorical_crossentropy from logits)
  std::vector<std::string> metrics;  // --metrics a,b: Keras metric names (empty: accuracy)
  uint64_t seed = 42;
  std::string data_dir;  // default: tk::data::default_fashion_mnist_dir()
  std::string train_images, train_labels, test_images, test_labels;
  float validation_split = 0.0f;
  // --data: a file in any supported format instead of the IDX options (cli/data_source.h)
  std::string data, validation_data, format = "auto", x, y, validation_y;
  int64_t shuffle_buffer = 10000;
  std::vector<std::string> given;  // the --data-only options given on the command line (rejected without --data)
  std::string dump_weights;        // --dump-weights: the final weights as exact text, for comparing runs
  std::string history_json;        // --history-json: the History as JSON (tk::isolated_fit reads it back)
  int verbose = -1;
  bool summary = true;
  std::string save;          // --save m.keras after training (keras_commands.cpp)
  RunOptions run;            // --device, --dtype-policy, --memory-limit
  int replicas = 1;          // --replicas N: data parallel over N logical devices of --device (MirroredStrategy)
  CallbackArgs callbacks;    // --backup-dir, --early-stopping, --csv-log, ...
  std::string tensorboard;   // --tensorboard DIR: a TensorBoard callback logging there
  bool isolate = false;      // --isolate: train in a child process (run_command.cpp)
  std::string class_weight;  // --class-weight 0:1,1:5: Keras' class_weight (parse_class_weight)
};

void add_fit_command(CLI::App& app, FitArgs& args);
// "0:1,1:5" -> Keras' class_weight {0: 1, 1: 5}; InvalidArgument naming the bad entry.
std::map<int, float> parse_class_weight(const std::string& text);
int run_fit(const FitArgs& args);

struct PlanArgs {
  std::string model = "dense:256:relu,dense:128:relu,dense:10";
  std::string batch_size = "128";  // or "auto": the plan of the largest batch that fits
  std::string optimizer = "adam";
  bool optimizer_given = false;  // -o/--optimizer given: it replaces a model file's compiled optimizer in the plan
  std::vector<int64_t> input_shape = {28, 28};
  RunOptions run;
  std::string svg;   // --svg FILE: the plan as a picture
  int replicas = 1;  // --replicas N: one replica's plan under data parallel over N devices
  std::string gpu;   // --gpu NAME: plan for this card without having it (its memory is the budget)
};
void add_plan_command(CLI::App& app, PlanArgs& args);
int run_plan(const PlanArgs& args);

// `trainkit export MODEL OUTPUT.onnx` (export_command.cpp).
struct ExportArgs {
  std::string model, output;
  std::vector<int64_t> input_shape = {28, 28};
  uint64_t seed = 42;
};
void add_export_command(CLI::App& app, ExportArgs& args);
int run_export(const ExportArgs& args);

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
// `trainkit env` (env_command.cpp): the TK_* variables, their values and sources (runtime/settings.h).
struct EnvArgs {
  bool markdown = false;  // --markdown: the table of docs/settings.md
};
void add_env_command(CLI::App& app, EnvArgs& args);
int run_env(const EnvArgs& args);
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
// A path ending in .keras or .h5 loads that model file (compiled when the file has a compile config).
std::unique_ptr<Model> make_model(const std::string& model, const Shape& sample_shape, float scale = 1.0f);

// Keras model files (keras_commands.cpp): `trainkit summary m.keras`, `trainkit evaluate m.keras --data F`.
bool is_model_file(const std::string& model);   // ends in .keras or .h5
void check_save_path(const std::string& path);  // --save: InvalidArgument unless it ends in .keras
void save_model_file(const Model& model, const std::string& path, int verbose);  // no-op for ""
// Features for a loaded model: reshaped to its input when only the layout differs (28x28 -> 784), and uint8
// pixels scaled to [0, 1] unless the model starts with a Rescaling (then they stay uint8 and it scales them, as in
// Keras, instead of scaling twice).
Tensor features_for(const Model& model, const Tensor& x);
struct SummaryArgs {
  std::string model;
};
void add_summary_command(CLI::App& app, SummaryArgs& args);
int run_summary(const SummaryArgs& args);
// --format (auto, or a format data_format knows) for a command that reads a data file.
void add_format_option(CLI::App* command, std::string& format);
// One line "<prefix>NAME: 0.1234 - ..." of every log; a NaN prints "nan" as Keras does (printf would say "-nan").
void print_logs(const Logs& logs, const std::string& prefix = "");
struct EvaluateArgs {
  std::string model, data, format = "auto", x, y;
  int64_t batch_size = 128;
  RunOptions run;
};
void add_evaluate_command(CLI::App& app, EvaluateArgs& args);
int run_evaluate(const EvaluateArgs& args);
// `trainkit predict m.keras --data FILE --out preds.npy` (predict_command.cpp).
struct PredictArgs {
  std::string model, data, out, format = "auto", x;
  int64_t batch_size = 32;  // Keras' predict default
  int verbose = -1;         // -1: a progress bar on a terminal, one line at the end otherwise
  RunOptions run;
};
void add_predict_command(CLI::App& app, PredictArgs& args);
int run_predict(const PredictArgs& args);

}  // namespace tk::cli
