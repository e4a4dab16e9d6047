// trainkit export MODEL OUTPUT.onnx: the model's inference program as an ONNX file.
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_spec.h"
#include "cli/usage.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

void add_export_command(CLI::App& app, ExportArgs& a) {
  CLI::App* cmd = app.add_subcommand("export", "Write a model as ONNX (IR 8, opset 17, the batch axis dynamic)");
  cmd->add_option("model", a.model, "The model, as --model takes it: \"cnn\" or layers after the input")->required();
  cmd->add_option("output", a.output, "The .onnx file to write")->required();
  cmd->add_option("--input-shape", a.input_shape, "Per-sample input shape, e.g. 28 28")->capture_default_str();
  cmd->add_option("-s,--seed", a.seed, "Seed for the weights")->capture_default_str();
}

int run_export(const ExportArgs& a) {
  if (!a.output.ends_with(".onnx"))
    throw InvalidArgument("export: the output file must end in .onnx, got '" + a.output + "'");
  utils::set_random_seed(a.seed);
  if (a.model != "cnn" && !is_model_file(a.model)) {
    parse_model_spec(a.model);  // validates the spec first
    clear_session();
  }
  std::unique_ptr<Model> model = make_model(a.model, Shape(a.input_shape));  // a spec, or a .keras/.h5 file
  model->export_onnx(a.output);
  std::printf("Wrote %s (%lld parameters)\n", a.output.c_str(), static_cast<long long>(model->count_params()));
  return 0;
}

}  // namespace tk::cli
