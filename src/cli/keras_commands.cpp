// Keras files on the command line: `trainkit summary m.keras`, `trainkit evaluate m.keras --data FILE`, and
// the helpers `trainkit fit --model m.keras` / `--save m.keras` use.
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/data_source.h"
#include "cli/usage.h"
#include "io/file_staging.h"
#include "trainkit/io/keras.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

bool is_model_file(const std::string& model) {
  // A name before the extension: ".keras" alone is not a model file.
  return (model.size() > 6 && model.ends_with(".keras")) || (model.size() > 3 && model.ends_with(".h5"));
}

void check_save_path(const std::string& path) {
  if (!path.empty() && !(path.size() > 6 && path.ends_with(".keras")))
    throw InvalidArgument("--save " + path + ": the path must end in .keras (Keras 3's model format)");
}

void save_model_file(const Model& model, const std::string& path, int verbose) {
  if (path.empty()) return;
  try {
    model.save(path);
  } catch (const OutOfMemoryError&) {
    // The trained model is still here and the previous file intact: try once more through the smallest staging
    // buffer (a GPU's tensors pass through it; io/file_staging.h) before giving up.
    const size_t was = io::file_staging_capacity();
    if (was <= io::kMinFileStagingBytes) throw;
    std::fprintf(stderr, "trainkit: saving %s ran out of memory; retrying with a %s staging buffer\n", path.c_str(),
                 config::format_bytes(io::kMinFileStagingBytes).c_str());
    io::set_file_staging_capacity(io::kMinFileStagingBytes);
    try {
      model.save(path);
    } catch (const OutOfMemoryError& again) {
      io::set_file_staging_capacity(was);
      throw OutOfMemoryError("--save " + path + ": not saved (the previous file, if any, is intact): " + again.what());
    }
    io::set_file_staging_capacity(was);
  }
  if (verbose != 0) std::printf("saved %s\n", path.c_str());
}

namespace {
// Whether the model scales its own input: a Rescaling is its first layer (Keras' image tutorials, and the models
// `trainkit fit` itself saves for uint8 pixels).
bool rescales_its_input(const Model& model) {
  for (const LayerPtr& l : model.layers())
    if (l->class_name() != "InputLayer") return l->class_name() == "Rescaling";
  return false;
}
}  // namespace

Tensor features_for(const Model& model, const Tensor& x) {
  const Shape want = model.inputs().at(0).shape();
  Tensor out = x;
  if (x.shape().rank() >= 1 && x.shape().sample_shape() != want.sample_shape()) {
    std::vector<int64_t> dims{x.dim(0)};
    int64_t n = 1;
    for (int i = 1; i < want.rank(); ++i) dims.push_back(want[i]), n *= want[i];
    if (n == x.shape().sample_shape().numel()) out = x.reshape(Shape(dims));
  }
  if (out.dtype() == DType::u8 && !rescales_its_input(model)) {  // else staging converts, the Rescaling scales
    out = out.to(DType::f32);
    float* p = out.data<float>();
    for (int64_t i = 0; i < out.numel(); ++i) p[i] *= 1.0f / 255.0f;
  }
  return out;
}

void add_format_option(CLI::App* command, std::string& format) {
  command->add_option("--format", format, "auto, idx, csv, npy, npz, hdf5 or tfrecord")
      ->check(choice_of([](const std::string& f) {
        if (f != "auto") data_format("", f);
      }))
      ->capture_default_str();
}

void print_logs(const Logs& logs, const std::string& prefix) {
  std::string line;
  for (const auto& [name, value] : logs.items()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", std::isnan(value) ? std::fabs(value) : value);  // "nan", never "-nan"
    line += (line.empty() ? "" : " - ") + prefix + name + ": " + buf;
  }
  std::printf("%s\n", line.c_str());
}

namespace {

void print_compile_config(const Model& m) {
  if (!m.optimizer()) {
    std::printf("Not compiled (the file has no compile config).\n");
    return;
  }
  std::string losses;
  for (const Loss& l : m.losses())
    losses += (losses.empty() ? "" : ", ") + l.name + (l.from_logits ? " (from_logits)" : "");
  std::string metrics;
  for (const Metric& s : m.metrics()) metrics += (metrics.empty() ? "" : ", ") + s.name;
  std::printf("Compiled: optimizer %s (learning_rate %g, iterations %lld), loss %s, metrics [%s]\n",
              m.optimizer()->name().c_str(), static_cast<double>(m.optimizer()->learning_rate()),
              static_cast<long long>(m.optimizer()->iterations()), losses.c_str(), metrics.c_str());
  if (m.loss_scale() > 0.0f)
    std::printf("Loss scaling (LossScaleOptimizer): scale %g, %lld finite steps since it last changed\n",
                static_cast<double>(m.loss_scale()), static_cast<long long>(m.loss_scale_step_counter()));
}

}  // namespace

void add_summary_command(CLI::App& app, SummaryArgs& a) {
  CLI::App* s =
      app.add_subcommand("summary", "Print the layers, shapes, parameters and compile config of a model file");
  s->add_option("model", a.model, "A Keras 3 .keras file or a Keras 2 .h5 model file")->required();
}

int run_summary(const SummaryArgs& a) {
  if (!is_model_file(a.model)) throw InvalidArgument("summary: '" + a.model + "' must be a .keras or .h5 model file");
  std::unique_ptr<Model> m = models::load_model(a.model, /*compile=*/true);
  m->summary();
  print_compile_config(*m);
  return 0;
}

void add_evaluate_command(CLI::App& app, EvaluateArgs& a) {
  CLI::App* e =
      app.add_subcommand("evaluate", "Evaluate a model file on a data file with its compiled loss and metrics");
  e->add_option("model", a.model, "A Keras 3 .keras file (compiled) or a Keras 2 .h5 model file")->required();
  e->add_option("--data", a.data, "Data file: .csv, .npz, .npy, .h5/.hdf5, .tfrecord or IDX, as for `trainkit fit`")
      ->required();
  add_format_option(e, a.format);
  e->add_option("--x", a.x, "Features (as for `trainkit fit --x`)");
  e->add_option("--y", a.y, "Labels (as for `trainkit fit --y`)");
  e->add_option("-b,--batch-size", a.batch_size, "Samples per step")->capture_default_str();
  add_run_options(e, a.run);
}

int run_evaluate(const EvaluateArgs& a) {
  if (a.batch_size <= 0)
    throw InvalidArgument("--batch-size must be a positive integer, got " + std::to_string(a.batch_size));
  if (!is_model_file(a.model)) throw InvalidArgument("evaluate: '" + a.model + "' must be a .keras or .h5 model file");
  const Device device = apply_run_options(a.run);
  std::unique_ptr<Model> m = models::load_model(a.model, /*compile=*/true);  // before the data: fail fast
  if (!m->optimizer())
    throw InvalidArgument("evaluate: " + a.model +
                          " has no compile config, so no loss to evaluate (save it from a compiled model)");
  configure_model(*m, a.run, device);
  const data::Dataset data = open_data_file(a.data, DataArgs{a.format, a.x, a.y}, "--data");
  print_logs(m->evaluate(data.batch(a.batch_size).prefetch(data::AUTOTUNE)));
  return 0;
}

}  // namespace tk::cli
