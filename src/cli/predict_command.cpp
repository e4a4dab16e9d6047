// `trainkit predict MODEL --data FILE [--x NAME] --out preds.npy|preds.npz`: a model file's outputs for every sample
// of a data file (Keras' model.predict), in batches, under the model's own dtype policy, on --device, with a progress
// bar. The predictions go to a .npy file ((samples, ...output shape)), or to a .npz with one array per output named
// after its output layer (Keras' model.output_names) — the only choice for a model with several outputs.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/data_source.h"
#include "cli/usage.h"
#include "trainkit/data/npy.h"
#include "trainkit/io/keras.h"
#include "trainkit/trainkit.h"

namespace tk::cli {
namespace {

// Keras' progress bar for predict: "k/N [=====>....]" redrawn on a terminal (at most every 50 ms), and one final
// line "N/N [==============================] - 1s 2ms/step". verbose 0: nothing; 2: the final line only.
class Progress {
 public:
  Progress(int verbose, int64_t steps) : verbose_(verbose), steps_(steps), terminal_(::isatty(1) != 0) {}
  void step() {
    ++done_;
    if (verbose_ != 1 || !terminal_) return;
    const auto now = Clock::now();
    if (done_ > 1 && std::chrono::duration<double>(now - last_).count() < 0.05) return;
    last_ = now;
    draw(false);
  }
  void finish() {
    if (verbose_ > 0) draw(true);
  }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(bool final_line) {
    const int64_t target = steps_ > 0 ? steps_ : done_;  // unknown length (a stream): the count so far
    constexpr int kWidth = 30;
    const int filled = target > 0 ? static_cast<int>(kWidth * done_ / target) : kWidth;
    std::string bar = "[";
    for (int i = 0; i < kWidth; ++i) bar += i < filled - 1 ? '=' : i == filled - 1 ? (done_ < target ? '>' : '=') : '.';
    bar += "]";
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double per_step = done_ > 0 ? elapsed / static_cast<double>(done_) : 0.0;
    if (steps_ > 0)
      std::printf("\r%lld/%lld %s", static_cast<long long>(done_), static_cast<long long>(steps_), bar.c_str());
    else
      std::printf("\r%lld/Unknown", static_cast<long long>(done_));
    if (final_line) std::printf(" - %.0fs %.0fms/step\n", elapsed, per_step * 1e3);
    std::fflush(stdout);
  }
  int verbose_;
  int64_t steps_, done_ = 0;
  bool terminal_;
  Clock::time_point start_ = Clock::now(), last_ = start_;
};

}  // namespace

void add_predict_command(CLI::App& app, PredictArgs& a) {
  CLI::App* p = app.add_subcommand(
      "predict", "Write a model file's predictions for every sample of a data file to a .npy file (Keras' predict)");
  p->add_option("model", a.model, "A Keras 3 .keras file or a Keras 2 .h5 model file")->required();
  p->add_option("--data", a.data,
                "Features file: .npy, .npz, .csv, .h5/.hdf5, .tfrecord or IDX images (no labels needed)")
      ->required();
  p->add_option("--out", a.out,
                "Where to write the predictions: a .npy file (samples, outputs...), or a .npz with one array per "
                "output named after its output layer (needed for a model with several outputs)")
      ->required();
  add_format_option(p, a.format);
  p->add_option("--x", a.x,
                "Features: NPZ key (x), HDF5 dataset (x), CSV columns (comma-separated; default all), TFRecord "
                "feature NAME[:DIMS[:DTYPE]]");
  p->add_option("-b,--batch-size", a.batch_size, "Samples per step")->capture_default_str();
  p->add_option("-v,--verbose", a.verbose,
                "0 silent, 1 progress bar, 2 one line at the end (default: bar on a "
                "terminal)");
  add_run_options(p, a.run);
}

int run_predict(const PredictArgs& a) {
  if (a.batch_size <= 0)
    throw InvalidArgument("--batch-size must be a positive integer, got " + std::to_string(a.batch_size));
  if (!is_model_file(a.model)) throw InvalidArgument("predict: '" + a.model + "' must be a .keras or .h5 model file");
  const bool npz = a.out.ends_with(".npz");
  if (!npz && !a.out.ends_with(".npy"))
    throw InvalidArgument("--out " + a.out +
                          ": the predictions are written as NumPy files: give a path ending in .npy (one output) or "
                          ".npz (one array per output)");
  const Device device = apply_run_options(a.run);
  std::unique_ptr<Model> m = models::load_model(a.model, /*compile=*/false);  // before the data: fail fast
  // Keras' output_names: the output layers' names; a layer's further outputs in the list (an LSTM's h and c with
  // return_state, which Keras names alike) get "_<output index>", so every array has its own name.
  std::vector<std::string> names;
  for (const KerasTensor& t : m->outputs()) {
    std::string n = t.node->layer->name;
    if (std::find(names.begin(), names.end(), n) != names.end()) n += "_" + std::to_string(t.index);
    names.push_back(n);
  }
  if (!npz && names.size() != 1) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw InvalidArgument("--out " + a.out + ": " + a.model + " has " + std::to_string(names.size()) + " outputs (" +
                          list + ") and a .npy file holds one array: give a path ending in .npz, which holds one " +
                          "array per output under its layer's name");
  }
  configure_model(*m, a.run, device);  // the file's own policy unless --dtype-policy is given
  const data::Dataset features = open_features_file(a.data, DataArgs{a.format, a.x, ""}, "--data");
  const int64_t samples = features.cardinality();
  const int64_t steps = samples >= 0 ? (samples + a.batch_size - 1) / a.batch_size : -1;
  const int verbose = a.verbose >= 0 ? a.verbose : (::isatty(1) ? 1 : 2);
  auto progress = std::make_shared<Progress>(verbose, steps);
  // Counted as predict reads each batch (one batch ahead of the step at most: no prefetch here).
  const data::Dataset batches = features.batch(a.batch_size).map([progress](data::Element e) {
    progress->step();
    return e;
  });
  const std::vector<Tensor> out = m->predict(batches);
  progress->finish();
  if (out.empty() || out[0].dim(0) == 0) throw InvalidArgument("--data " + a.data + ": the file holds no samples");
  if (npz) {
    std::vector<std::pair<std::string, Tensor>> arrays;
    for (size_t i = 0; i < out.size(); ++i) arrays.emplace_back(names.at(i), out[i]);
    data::save_npz(a.out, arrays);
  } else {
    data::save_npy(a.out, out[0]);
  }
  if (verbose > 0)
    for (size_t i = 0; i < out.size(); ++i)
      std::printf("wrote %s%s: %s %s\n", a.out.c_str(), npz ? ("[\"" + names.at(i) + "\"]").c_str() : "",
                  out[i].shape().to_string().c_str(), std::string(dtype_name(out[i].dtype())).c_str());
  return 0;
}

}  // namespace tk::cli
