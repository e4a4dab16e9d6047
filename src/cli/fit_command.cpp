#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/data_source.h"
#include "cli/model_spec.h"
#include "cli/usage.h"
#include "trainkit/io/atomic_file.h"
#include "trainkit/io/tensorboard.h"
#include "trainkit/nn/check_names.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk::cli {

void add_fit_command(CLI::App& app, FitArgs& a) {
  CLI::App* fit = app.add_subcommand(
      "fit", "Train a model (default: MLP 784-256-128-10 on Fashion-MNIST) and report test accuracy");
  fit->add_option(
         "-m,--model", a.model,
         "Layers after the input, e.g. dense:256:relu,dropout:0.2,dense:10 or "
         "conv2d:32:3:relu,maxpool:2,batchnorm,flatten,dense:10 (conv2d, dwconv2d, sepconv2d, maxpool, "
         "avgpool, globalavgpool, globalmaxpool, batchnorm[:sync], dense, dropout, activation, relu[:max], "
         "leakyrelu, elu, prelu, softmax[:axis], flatten; on token ids embedding:INPUT_DIM:OUTPUT_DIM first, "
         "then conv1d, maxpool1d, avgpool1d, globalavgpool1d, globalmaxpool1d, lstm:UNITS[:seq], gru, "
         "simplernn, bilstm, bigru; training-only gaussian_noise:STDDEV, gaussian_dropout:RATE, "
         "random_flip[:MODE], random_contrast:FACTOR, random_translation:H:W, random_rotation:F, random_zoom:H[:W]; "
         "center_crop:H:W, resizing:H:W[:nearest]); \"cnn\"; or a "
         "model file "
         "(.keras, Keras 2 .h5) to train further with its compile config and optimizer state")
      ->capture_default_str();
  fit->add_option("--save", a.save, "Save the trained model as a Keras 3 .keras file");
  fit->add_option("-e,--epochs", a.epochs, "Passes over the training data")->capture_default_str();
  fit->add_option("--initial-epoch", a.initial_epoch,
                  "Epoch at which to start training (Keras' initial_epoch): epochs initial-epoch+1 to --epochs run, "
                  "numbered as in the run being continued")
      ->capture_default_str();
  fit->add_option("--steps-per-epoch", a.steps_per_epoch,
                  "Steps (batches) per epoch instead of one pass over the data; a pass then continues across "
                  "epochs (Keras' steps_per_epoch). 0: one pass")
      ->capture_default_str();
  fit->add_option("--validation-steps", a.validation_steps,
                  "Batches of the validation data evaluated after each epoch (Keras' validation_steps). 0: all")
      ->capture_default_str();
  fit->add_option("-b,--batch-size", a.batch_size,
                  "Samples per step, or \"auto\": the largest that fits the memory budget (from the plan)")
      ->capture_default_str();
  fit->add_option("--micro-batch-size", a.micro_batch_size,
                  "Split each batch into micro-batches of this size with gradient accumulation (same update), or "
                  "\"auto\": the largest that fits")
      ->capture_default_str();
  fit->add_option("-l,--learning-rate", a.learning_rate,
                  "Optimizer learning rate (default: the optimizer's Keras default, 0.001; sgd 0.01)");
  fit->add_option("-o,--optimizer", a.optimizer, optimizer_names() + " (Keras defaults otherwise)")
      ->check(choice_of([](const std::string& name) { optimizers::get(name); }))
      ->each([&a](const std::string&) { a.optimizer_given = true; })
      ->capture_default_str();
  fit->add_option("--loss", a.loss,
                  "Loss by its Keras name (mse, mae, huber, kld, binary_crossentropy, binary_focal_crossentropy, "
                  "categorical_crossentropy, sparse_categorical_crossentropy, msle, poisson, cosine_similarity, hinge, "
                  "squared_hinge; from probabilities, as Keras' string names are). Default: "
                  "sparse_categorical_crossentropy from logits. With a model file: replaces its compiled loss")
      ->check(choice_of([](const std::string& name) { losses::check(Loss(name)); }));
  fit->add_option("--metrics", a.metrics,
                  "Comma-separated Keras metric names (accuracy, precision, recall, auc, mae, mse, "
                  "top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, ...). Default: accuracy. With a "
                  "model file: replaces its compiled metrics")
      ->delimiter(',')
      ->check(choice_of([](const std::string& name) { metrics::check(Metric(name)); }));
  fit->add_option("-s,--seed", a.seed, "Seed for weights, shuffling and dropout")->capture_default_str();
  add_run_options(fit, a.run);
  fit->add_option("--replicas", a.replicas,
                  "Data parallel in this process: split --device into N logical devices with equal shares of its "
                  "budget and train one replica on each (MirroredStrategy; each global batch split across them); "
                  "with --device cuda, one replica per GPU (NCCL). Under mpirun the ranks are the replicas")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  add_callback_options(fit, a.callbacks);
  fit->add_option("--data-dir", a.data_dir, "Directory with the four Fashion-MNIST IDX files (.gz or plain)");
  fit->add_option("--train-images", a.train_images, "IDX file of training images (overrides --data-dir)");
  fit->add_option("--train-labels", a.train_labels, "IDX file of training labels");
  fit->add_option("--test-images", a.test_images, "IDX file of test images");
  fit->add_option("--test-labels", a.test_labels, "IDX file of test labels");
  fit->add_option("--data", a.data,
                  "Training data file: .csv, .npz, .npy, .h5/.hdf5, .tfrecord or IDX (format from the name, or "
                  "--format); replaces Fashion-MNIST");
  fit->add_option("--validation-data", a.validation_data,
                  "Data file (same format as --data) evaluated after every epoch and at the end");
  add_format_option(fit, a.format);
  fit->add_option("--x", a.x,
                  "Features: CSV columns (comma-separated; default all but --y), NPZ key (x), HDF5 dataset (x), "
                  "TFRecord feature NAME[:DIMS[:DTYPE]] (e.g. image:28x28)");
  fit->add_option("--y", a.y,
                  "Labels: CSV column, NPZ key (y), HDF5 dataset (y), TFRecord int64 feature (label), or the labels "
                  "file for IDX and NPY");
  fit->add_option("--validation-y", a.validation_y, "Labels file for --validation-data (IDX and NPY)");
  fit->add_option("--shuffle-buffer", a.shuffle_buffer, "Shuffle buffer for --data (elements)")->capture_default_str();
  fit->add_option("--validation-split", a.validation_split, "Fraction of the training data held out for validation")
      ->capture_default_str();
  // Options that only apply to --data: remember which were given, so that run_fit refuses them without --data
  // (silently ignoring one would train on something other than what the command line says).
  for (const char* name : {"--format", "--x", "--y", "--validation-y", "--shuffle-buffer"})
    fit->get_option(name)->each([&a, name](const std::string&) { a.given.emplace_back(name); });
  fit->add_option("--class-weight", a.class_weight,
                  "Keras' class_weight: CLASS:WEIGHT pairs, comma-separated (0:1,1:5); a row's loss is multiplied by "
                  "its label's weight, 1 for a class not listed");
  fit->add_option("--dump-weights", a.dump_weights,
                  "Write the final weights to this file as text, exactly (%.9g; one 'tensor NAME float32 RANK DIMS' "
                  "line and one line of values per weight), to compare runs");
  fit->add_option("--history-json", a.history_json,
                  "Write the History (per-epoch logs) to this file as JSON: {\"epoch\": [...], \"history\": "
                  "{\"loss\": [...], ...}}");
  fit->add_option("-v,--verbose", a.verbose,
                  "0 silent, 1 progress bar, 2 one line per epoch (default: bar on a terminal)");
  fit->add_flag("!--no-summary", a.summary, "Do not print the model summary");
  fit->add_option("--tensorboard", a.tensorboard,
                  "Write TensorBoard logs (train/ and validation/ runs, epoch scalars) to this folder");
  fit->add_flag("--isolate", a.isolate, "Train in a child process: its memory is returned to the system when it ends");
}

std::map<int, float> parse_class_weight(const std::string& text) {
  std::map<int, float> out;
  size_t at = 0;
  while (!text.empty() && at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, end - at);
    const size_t colon = entry.find(':');
    size_t used_id = 0, used_w = 0;
    int id = 0;
    float w = 0.0f;
    try {
      if (colon == std::string::npos) throw std::invalid_argument(entry);
      id = std::stoi(entry.substr(0, colon), &used_id);
      w = std::stof(entry.substr(colon + 1), &used_w);
    } catch (const std::exception&) {
      used_id = used_w = std::string::npos;
    }
    if (colon == std::string::npos || used_id != colon || used_w != entry.size() - colon - 1)
      throw InvalidArgument("--class-weight: '" + entry + "' is not CLASS:WEIGHT (e.g. --class-weight 0:1,1:5)");
    if (!out.emplace(id, w).second)
      throw InvalidArgument("--class-weight: class " + std::to_string(id) + " is given twice");
    at = end + 1;
  }
  return out;
}

int64_t parse_batch_option(const std::string& option, const std::string& value, bool zero_ok) {
  if (value == "auto") return kAutoBatchSize;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < (zero_ok ? 0 : 1))
    throw InvalidArgument(option + " must be " + (zero_ok ? "a non-negative" : "a positive") +
                          " integer or \"auto\", got " + value);
  return v;
}

// `scale` != 1: a Rescaling right after the input (folded into batch staging, so the data stays narrow).
std::unique_ptr<Model> make_model(const std::string& model, const Shape& sample, float scale) {
  if (is_model_file(model)) return models::load_model(model, /*compile=*/true);
  if (model == "cnn") return models::tutorial_cnn(sample, 10, scale);
  std::vector<LayerPtr> spec = parse_model_spec(model);
  if (model_spec_takes_tokens(spec)) {  // token ids: an int32 Input of the sample's shape, no scaling or flattening
    std::vector<LayerPtr> layers{layers::Input(sample, {}, DType::i32)};
    for (LayerPtr& l : spec) layers.push_back(l);
    return std::make_unique<Sequential>(layers);
  }
  std::vector<LayerPtr> layers{layers::Input(sample)};
  if (scale != 1.0f) layers.push_back(layers::Rescaling(scale));
  if (model_spec_takes_images(spec)) {  // (H, W) grayscale gets a channel axis; (H, W, C) is taken as it is
    if (sample.rank() == 2) {
      layers.push_back(layers::Reshape(Shape{sample[0], sample[1], 1}));
    } else if (sample.rank() != 3) {
      throw InvalidArgument("--model " + model + ": its first layer (" + spec.front()->class_name() +
                            ") takes images, (height, width) or (height, width, channels), but a sample is " +
                            sample.to_string() + " (start the spec with dense or flatten for flat features)");
    }
  } else if (sample.rank() > 1) {
    layers.push_back(layers::Flatten());
  }
  for (LayerPtr& l : spec) layers.push_back(l);
  return std::make_unique<Sequential>(layers);
}

namespace {

// The data-parallel strategy of a run, if any: MPI's ranks under a launcher, or --replicas N logical devices.
struct Strategies {
  std::optional<distribute::MultiWorkerMirroredStrategy> mpi;
  std::optional<distribute::MirroredStrategy> mirrored;
};

// `mpirun ... trainkit fit --device cuda`: each rank on its local rank's GPU (MultiWorkerMirroredStrategy on cuda; MPI
// and NCCL start here). Made before apply_run_options, so that the budget and --memory-limit apply to that GPU and
// no rank touches cuda:0 unless it is its own. Not under a launcher, or not cuda: none.
std::optional<distribute::MultiWorkerMirroredStrategy> mpi_gpu_strategy(const RunOptions& run) {
  if (!distribute::MultiWorkerMirroredStrategy::launched_by_mpi() || run.device == "auto") return std::nullopt;
  if (parse_device(run.device).kind != DeviceKind::cuda) return std::nullopt;
  if (run.device.find(':') != std::string::npos)
    throw InvalidArgument("--device " + run.device +
                          " under mpirun: each rank takes the GPU of its local rank (rank r of a node on cuda:r, "
                          "modulo the GPUs it sees); pass --device cuda, and choose the GPUs with "
                          "CUDA_VISIBLE_DEVICES");
  distribute::MultiWorkerMirroredStrategy::Options options;
  options.device = DeviceKind::cuda;
  return distribute::MultiWorkerMirroredStrategy(options);
}

// Right after apply_run_options, before any data is loaded: --replicas splits the device into logical devices,
// which must precede the first allocation on it. `gpu_ranks`: mpi_gpu_strategy's.
Strategies make_strategies(const FitArgs& a, Device device,
                           std::optional<distribute::MultiWorkerMirroredStrategy> gpu_ranks) {
  Strategies s;
  // Under an MPI launcher (`mpirun -np N trainkit fit ...`, mpiexec, srun): data parallel over the ranks, one replica
  // per process (MultiWorkerMirroredStrategy). Every rank loads the same data and trains on its rows of each global
  // batch; rank 0 alone prints and writes files.
  if (gpu_ranks)
    s.mpi = std::move(gpu_ranks);
  else if (distribute::MultiWorkerMirroredStrategy::launched_by_mpi())
    s.mpi.emplace();
  if (s.mpi && s.mpi->device().kind != device.kind)  // --device auto chose a GPU: it would train on the cpu
    throw InvalidArgument("--device " + device.to_string() +
                          " under mpirun: pass --device cuda (each rank on its local rank's GPU) or --device cpu");
  if (a.replicas > 1) {
    if (s.mpi)
      throw InvalidArgument("--replicas " + std::to_string(a.replicas) +
                            " under mpirun: the ranks are the replicas (one per process); drop --replicas, or run "
                            "without mpirun");
    s.mirrored.emplace(replicas_over(device, a.replicas, "trainkit fit", a.run.memory_limit));
  }
  return s;
}

// compile(), inside the strategy's scope when there is one. A model file that brings its own compiled optimizer
// (and its state) cannot be replicated yet.
// A model file's optimizer is kept with its state; an explicit --optimizer naming another class is an error (never
// ignored), and --learning-rate sets the kept optimizer's rate (as `model.optimizer.learning_rate = lr` in Keras).
void compile_model(Model& model, const OptimizerPtr& optimizer, const Strategies& s, const FitArgs& a) {
  if (model.optimizer()) {
    if (s.mpi || s.mirrored)
      throw Unsupported(std::string(s.mpi ? "under mpirun" : "with --replicas") +
                        ", --model with a model file that holds a compiled optimizer is not supported yet "
                        "(train from a layer spec, or save the model without its optimizer)");
    if (a.optimizer_given && optimizer->name() != model.optimizer()->name())
      throw InvalidArgument("--optimizer " + a.optimizer + ": the model file " + a.model + " holds a compiled " +
                            model.optimizer()->name() +
                            " optimizer with its state, which trainkit keeps (drop --optimizer, or save the model "
                            "without its optimizer to start a new one)");
    if (a.learning_rate) {
      if (const auto& schedule = model.optimizer()->learning_rate_schedule())
        throw InvalidArgument("--learning-rate: the optimizer in " + a.model + " follows a " + schedule->name() +
                              " learning-rate schedule, which sets the rate at every step (drop --learning-rate)");
      model.optimizer()->set_learning_rate(*a.learning_rate);
    }
    if (!a.loss.empty() || !a.metrics.empty())  // the same optimizer object: its state is kept
      model.compile(model.optimizer(), a.loss.empty() ? model.losses() : std::vector<Loss>{Loss(a.loss)},
                    a.metrics.empty() ? model.metrics() : std::vector<Metric>(a.metrics.begin(), a.metrics.end()));
    return;  // a model file keeps its compile config and optimizer state
  }
  auto compile = [&] {
    const Loss loss = a.loss.empty() ? losses::SparseCategoricalCrossentropy({.from_logits = true}) : Loss(a.loss);
    model.compile(
        optimizer, loss,
        a.metrics.empty() ? std::vector<Metric>{"accuracy"} : std::vector<Metric>(a.metrics.begin(), a.metrics.end()));
  };
  if (s.mirrored)
    distribute::in_scope(&*s.mirrored, compile);
  else
    distribute::in_scope(s.mpi ? &*s.mpi : nullptr, compile);
}

// The callback options' callbacks, then TensorBoard (--tensorboard).
std::vector<CallbackPtr> cli_callbacks(const FitArgs& a, bool has_validation) {
  std::vector<CallbackPtr> callbacks = make_callbacks(a.callbacks, has_validation, a.verbose);
  if (!a.tensorboard.empty()) callbacks.push_back(std::make_shared<callbacks::TensorBoard>(a.tensorboard));
  return callbacks;
}

bool explicit_files_given(const FitArgs& a) {
  return !a.train_images.empty() || !a.train_labels.empty() || !a.test_images.empty() || !a.test_labels.empty();
}

// The final weights as text: "tensor <layer/weight> float32 <rank> <dims...>" then the values, %.9g (exact for
// float32), one line each — the format of tests/fixtures/parity_mlp.txt. Written atomically.
// {"epoch": [0, 1], "history": {"loss": [...], ...}}, doubles that read back exactly. Written atomically.
void write_history_json(const History& h, const std::string& path) {
  nlohmann::json j;
  j["epoch"] = h.epoch;
  j["history"] = nlohmann::json::object();
  for (const auto& [k, v] : h.history) j["history"][k] = v;
  io::write_file_atomic(path, j.dump() + "\n");
}

void dump_weights(Model& model, const std::string& path) {
  std::string text = "# trainkit fit --dump-weights: final weights, get_weights() order\n";
  char buf[32];
  for (const LayerPtr& l : model.layers())
    for (const Weight& w : l->weights()) {
      // Read in place: a copy would come out of the memory budget the run was sized to.
      const Tensor v = w.value.dtype() == DType::f32 ? w.value : w.value.to(DType::f32);
      text.append("tensor ").append(w.name).append(" float32 ").append(std::to_string(v.shape().rank()));
      for (int64_t d : v.shape().dims()) text.append(" ").append(std::to_string(d));
      text.append("\n");
      const float* p = v.data<float>();
      for (int64_t i = 0; i < v.numel(); ++i) {
        std::snprintf(buf, sizeof buf, i == 0 ? "%.9g" : " %.9g", static_cast<double>(p[i]));
        text += buf;
      }
      text += "\n";
    }
  io::write_file_atomic(path, text);
}

// Test data is evaluated in batches of up to 1000, but never larger than the training batch: a budget that
// sized the training batch (--batch-size auto, or a number chosen by `trainkit plan`) must hold the evaluation
// too. After fit, the model's own memory counts as available, so "auto" is re-resolved the same way.
constexpr int64_t kEvaluationBatch = 1000;
int64_t evaluation_batch(Model& model, int64_t batch_size) {
  if (batch_size != kAutoBatchSize) return std::min(batch_size, kEvaluationBatch);
  return std::max<int64_t>(1, model.largest_batch_that_fits(model.memory_available_for_training(), kEvaluationBatch));
}

// After fit, rank 0 alone: --dump-weights, --history-json, the test line (each log as test_<name>), --save, and last
// the peak memory of the model's device (a GPU's, not the host's, for --device cuda).
int finish_fit(const FitArgs& a, Model& model, const History& history, const std::optional<Logs>& test) {
  if (!model.is_chief()) return 0;
  if (!a.dump_weights.empty()) dump_weights(model, a.dump_weights);
  if (!a.history_json.empty()) write_history_json(history, a.history_json);
  if (test) print_logs(*test, "test_");
  save_model_file(model, a.save, a.verbose);
  const MemoryInfo mem = config::get_memory_info(model.device());
  std::printf("peak memory: %zu bytes (%s) of a %zu-byte budget (%s) on %s\n", mem.peak,
              config::format_bytes(mem.peak).c_str(), mem.limit, config::format_bytes(mem.limit).c_str(),
              model.device().to_string().c_str());
  return 0;
}

// fit over a --data file: file -> shuffle -> batch -> prefetch, validation from --validation-data.
int run_fit_data(const FitArgs& a, OptimizerPtr optimizer, int64_t batch_size, int64_t micro_batch_size, Device device,
                 const Strategies& strategies, std::unique_ptr<Model> file_model, std::vector<CallbackPtr> callbacks) {
  if (a.validation_split != 0.0f)
    throw InvalidArgument("--validation-split does not apply to --data (a stream): pass --validation-data");
  if (a.shuffle_buffer <= 0)
    throw InvalidArgument("--shuffle-buffer must be positive, got " + std::to_string(a.shuffle_buffer));
  if (!a.data_dir.empty())
    throw InvalidArgument("--data-dir does not apply to --data (which replaces Fashion-MNIST): give one or the other");
  if (!a.validation_y.empty() && a.validation_data.empty())
    throw InvalidArgument("--validation-y " + a.validation_y + " needs --validation-data (the features it labels)");
  const std::string train_format = data_format(a.data, a.format);
  if ((train_format == "idx" || train_format == "npy") && !a.x.empty())
    throw InvalidArgument("--x does not apply to " + train_format + " (--data is the features file itself, --y " +
                          "the labels file): drop --x");
  const DataArgs args{a.format, a.x, a.y};
  const data::Dataset train_src = open_data_file(a.data, args, "--data");
  std::optional<data::Dataset> val_src;
  if (!a.validation_data.empty()) {
    DataArgs v = args;
    if (!a.validation_y.empty()) v.y = a.validation_y;
    const std::string fmt = data_format(a.validation_data, a.format);
    if ((fmt == "idx" || fmt == "npy") && a.validation_y.empty())
      throw InvalidArgument("--validation-data " + a.validation_data + ": " + fmt +
                            " needs its labels file as --validation-y");
    val_src = open_data_file(a.validation_data, v, "--validation-data");
  }
  data::Element first;
  {
    data::Iterator it = train_src.iterator();
    if (!it.next(first)) throw InvalidArgument("--data " + a.data + ": the file holds no samples");
  }
  std::unique_ptr<Model> owned =
      file_model ? std::move(file_model) : make_model(a.model, first[0].shape(), feature_scale(first[0].dtype()));
  Model& model = *owned;
  configure_model(model, a.run, device);
  compile_model(model, optimizer, strategies, a);
  if (a.summary && a.verbose != 0 && model.is_chief()) model.summary();  // under mpirun: rank 0 prints
  // fit(Dataset) takes the batch size from the dataset, so the CLI resolves "auto" for --data itself, by the
  // rules Model::fit applies to arrays (Model::auto_batch_size / auto_micro_batch_size: per replica under a strategy)
  // and with the same report line; the sample count is unknown for a stream, so the cap is FitOptions'
  // auto_batch_cap. The micro-batch: the largest whose plan fits next to the gradient accumulators.
  const int64_t batch = batch_size == kAutoBatchSize
                            ? model.auto_batch_size(FitOptions{}.auto_batch_cap, a.verbose != 0, "--batch-size auto")
                            : batch_size;
  const int64_t micro = micro_batch_size == kAutoBatchSize
                            ? model.auto_micro_batch_size(batch, a.verbose != 0, "--micro-batch-size auto")
                            : micro_batch_size;
  const data::Dataset train = train_src.shuffle(a.shuffle_buffer, a.seed).batch(batch).prefetch(data::AUTOTUNE);
  std::optional<data::Dataset> val;
  if (val_src) val = val_src->batch(std::min(batch, kEvaluationBatch)).prefetch(data::AUTOTUNE);
  const History history = model.fit(train, {.epochs = a.epochs,
                                            .verbose = a.verbose,
                                            .callbacks = std::move(callbacks),
                                            .initial_epoch = a.initial_epoch,
                                            .steps_per_epoch = a.steps_per_epoch,
                                            .validation_steps = a.validation_steps,
                                            .micro_batch_size = micro,
                                            .validation_dataset = val,
                                            .class_weight = parse_class_weight(a.class_weight)});
  // Under mpirun every rank evaluates its share of the batches (Model::evaluate sums the ranks' logs).
  const std::optional<Logs> test = val ? std::optional<Logs>(model.evaluate(*val)) : std::nullopt;
  return finish_fit(a, model, history, test);
}

}  // namespace

int run_fit(const FitArgs& a) {
  // Hyperparameters first: a mistake there should not cost a data load.
  if (a.epochs < 0) throw InvalidArgument("--epochs must be >= 0, got " + std::to_string(a.epochs));
  if (a.initial_epoch < 0 || a.initial_epoch > a.epochs)
    throw InvalidArgument("--initial-epoch must be in [0, --epochs], got " + std::to_string(a.initial_epoch) +
                          " with --epochs " + std::to_string(a.epochs) +
                          " (--epochs is the last epoch's number, as Keras' epochs, not a count from --initial-epoch)");
  if (a.steps_per_epoch < 0)
    throw InvalidArgument("--steps-per-epoch must be >= 0 (0: one pass), got " + std::to_string(a.steps_per_epoch));
  if (a.validation_steps < 0)
    throw InvalidArgument("--validation-steps must be >= 0 (0: all), got " + std::to_string(a.validation_steps));
  if (a.validation_steps > 0 && a.validation_split == 0.0f && a.validation_data.empty())
    throw InvalidArgument("--validation-steps needs validation data: add --validation-split or --validation-data");
  const int64_t batch_size = parse_batch_option("--batch-size", a.batch_size, false);
  const int64_t micro_batch_size = parse_batch_option("--micro-batch-size", a.micro_batch_size, true);
  parse_class_weight(a.class_weight);  // a bad --class-weight fails before the data is loaded
  if (!(a.validation_split >= 0.0f && a.validation_split < 1.0f))
    throw InvalidArgument("--validation-split must be in [0, 1), got " + std::to_string(a.validation_split));
  std::vector<CallbackPtr> callbacks = cli_callbacks(a, a.validation_split > 0.0f || !a.validation_data.empty());
  std::optional<distribute::MultiWorkerMirroredStrategy> gpu_ranks = mpi_gpu_strategy(a.run);
  RunOptions run = a.run;
  if (gpu_ranks) run.device = gpu_ranks->device().to_string();  // this rank's GPU
  const Device device = apply_run_options(run);                 // before the data: the budget precedes any allocation
  const Strategies strategies = make_strategies(a, device, std::move(gpu_ranks));
  utils::set_random_seed(a.seed);
  OptimizerPtr optimizer =
      a.learning_rate ? optimizers::get(a.optimizer, *a.learning_rate) : optimizers::get(a.optimizer);
  check_save_path(a.save);
  std::unique_ptr<Model> file_model;  // loaded before the data: a bad file should not cost a data load
  if (is_model_file(a.model)) {
    file_model = make_model(a.model, Shape{});
  } else if (a.model != "cnn") {
    parse_model_spec(a.model);  // validates the spec before the data is loaded
    clear_session();            // so that the real model's layers are named dense, dense_1, ...
  }

  if (!a.data.empty()) {
    if (explicit_files_given(a))
      throw InvalidArgument(
          "--data replaces --train-images/--train-labels/--test-images/--test-labels: give one or "
          "the other");
    return run_fit_data(a, optimizer, batch_size, micro_batch_size, device, strategies, std::move(file_model),
                        std::move(callbacks));
  }
  if (!a.validation_data.empty()) throw InvalidArgument("--validation-data needs --data");
  if (!a.given.empty())
    throw InvalidArgument(a.given.front() + " applies to --data only (" +
                          (explicit_files_given(a) ? std::string("--train-images/--train-labels/--test-images/"
                                                                 "--test-labels read IDX files")
                                                   : std::string("the built-in Fashion-MNIST has its own")) +
                          "): drop it, or train on a file with --data");
  data::FashionMnist d;
  if (explicit_files_given(a)) {
    if (a.train_images.empty() || a.train_labels.empty() || a.test_images.empty() || a.test_labels.empty())
      throw InvalidArgument("--train-images, --train-labels, --test-images and --test-labels must be given together");
    std::tie(d.x_train, d.y_train) = data::load_idx_pair(a.train_images, a.train_labels);
    std::tie(d.x_test, d.y_test) = data::load_idx_pair(a.test_images, a.test_labels);
    d.x_train = as_features(d.x_train);
    d.x_test = as_features(d.x_test);
  } else {  // uint8 pixels, scaled by the model's Rescaling as each batch is staged
    d = data::load_fashion_mnist(a.data_dir.empty() ? data::default_fashion_mnist_dir() : a.data_dir,
                                 /*scale_to_float=*/false);
  }
  if (d.x_train.shape().rank() < 2)
    throw InvalidArgument("training images must have a sample shape, got " + d.x_train.shape().to_string());

  if (file_model) {
    d.x_train = features_for(*file_model, d.x_train);
    d.x_test = features_for(*file_model, d.x_test);
  }
  std::unique_ptr<Model> owned =
      file_model ? std::move(file_model)
                 : make_model(a.model, d.x_train.shape().sample_shape(), feature_scale(d.x_train.dtype()));
  Model& model = *owned;
  configure_model(model, a.run, device);
  compile_model(model, optimizer, strategies, a);
  if (a.summary && a.verbose != 0 && model.is_chief()) model.summary();  // under mpirun: rank 0 prints

  const History history = model.fit(d.x_train, d.y_train,
                                    {.batch_size = batch_size,
                                     .epochs = a.epochs,
                                     .verbose = a.verbose,
                                     .callbacks = std::move(callbacks),
                                     .validation_split = a.validation_split,
                                     .initial_epoch = a.initial_epoch,
                                     .steps_per_epoch = a.steps_per_epoch,
                                     .validation_steps = a.validation_steps,
                                     .micro_batch_size = micro_batch_size,
                                     .class_weight = parse_class_weight(a.class_weight)});
  // Under mpirun every rank evaluates its share of the batches (Model::evaluate sums the ranks' logs).
  const Logs test = model.evaluate(d.x_test, d.y_test, {.batch_size = evaluation_batch(model, batch_size)});
  return finish_fit(a, model, history, test);
}

}  // namespace tk::cli
