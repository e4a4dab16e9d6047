// The public Keras file API (trainkit/io/keras.h).
#include <chrono>
#include <ctime>

#include "io/keras_internal.h"
#include "runtime/device_memory.h"
#include "trainkit/core/error.h"
#include "trainkit/io/atomic_file.h"
#include "trainkit/io/keras.h"

namespace tk {

namespace {

std::string now_string() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d@%H:%M:%S", &tm);
  return buf;
}

std::string metadata_json() {
  io::keras::json m = {{"keras_version", io::kKerasVersionWritten},
                       {"date_saved", now_string()},
                       {"trainkit_format", io::kKerasFormatVersion}};
  return m.dump();
}

// The archive's model.weights.h5, streamed to a temporary file and read there by the HDF5 helper: the tree's datasets
// stay in the helper's data file until weights_from_tree reads each into its destination.
io::H5Tree open_weights_member(const std::string& path) {
  io::TempFile member("tk-keras-weights", path);
  io::keras::extract_weights_member(path, member);
  return io::open_h5_tree_file(member.path(), path + ": model.weights.h5");
}

}  // namespace

namespace io {

void save_keras(const Model& model, const std::string& path) {
  if (!path.ends_with(".keras"))
    throw InvalidArgument("save: '" + path +
                          "' must end in .keras (Keras 3's format; use save_weights for .weights.h5)");
  const runtime::FileOperation op("saving " + path);
  // The weights go to a temporary file beside the archive, each from its tensor's memory; libzip copies that file
  // into the archive in small pieces. Nothing holds a copy of all weights or optimizer state.
  AtomicFile weights(path + ".weights");  // never committed: removed when done
  write_h5_tree_file(keras::weights_to_tree(model), weights.temp_path().string(), path);
  AtomicFile archive(path);
  keras::write_archive_file(metadata_json(), keras::model_to_json(model).dump(), weights.temp_path().string(),
                            archive.temp_path().string(), path);
  archive.commit();
}

void save_keras_weights(const Model& model, const std::string& path) {
  if (!path.ends_with(".weights.h5"))
    throw InvalidArgument("save_weights: '" + path + "' must end in .weights.h5 (as Keras 3 requires)");
  const runtime::FileOperation op("saving " + path);
  AtomicFile file(path);
  write_h5_tree_file(keras::weights_to_tree(model), file.temp_path().string(), path);
  file.commit();
}

void load_keras_weights(Model& model, const std::string& path) {
  const runtime::FileOperation op("loading " + path);
  if (path.ends_with(".keras")) {
    keras::Archive a = keras::read_archive(path, /*with_weights=*/false);
    keras::check_metadata(a.metadata, path);
    keras::weights_from_tree(model, open_weights_member(path), path + ": model.weights.h5");
    return;
  }
  if (!path.ends_with(".h5"))
    throw InvalidArgument("load_weights: '" + path + "' must end in .weights.h5, .h5 or .keras");
  keras::weights_from_tree(model, open_h5_tree_file(path, path), path);
}

}  // namespace io

namespace models {

namespace {
// Keras writes `"compile_config": {}` (or null) for a model that was never compiled: it loads uncompiled.
bool has_compile_config(const io::keras::json& config) {
  return config.contains("compile_config") && !config["compile_config"].is_null() &&
         !(config["compile_config"].is_object() && config["compile_config"].empty());
}
}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, bool compile) {
  const runtime::FileOperation op("loading " + path);
  if (path.ends_with(".keras")) {
    io::keras::Archive a = io::keras::read_archive(path, /*with_weights=*/false);
    io::keras::check_metadata(a.metadata, path);
    const std::string label = path + ": config.json";
    const io::keras::json config = io::keras::parse_json(a.config, label);
    io::H5Tree weights = open_weights_member(path);  // read (and checked) by the helper before anything is built
    std::unique_ptr<Model> model = io::keras::model_from_json(config, label);
    if (compile && has_compile_config(config)) io::keras::compile_from_json(*model, config["compile_config"], label);
    io::keras::weights_from_tree(*model, weights, path + ": model.weights.h5");
    return model;
  }
  if (path.ends_with(".h5")) {
    io::H5Tree tree = io::open_h5_tree_file(path, path);
    const std::string* config = tree.attr("", "model_config");
    if (!config)
      throw FormatError(path +
                        ": no 'model_config' attribute: a weights-only file (build the model and call "
                        "load_weights), or not a Keras 2 model file");
    const std::string* version = tree.attr("", "keras_version");
    if (version && version->rfind("2.", 0) != 0 && version->rfind("3.", 0) != 0)
      throw Unsupported(path + ": written by Keras " + *version + ", a version trainkit does not read");
    const std::string label = path + ": model_config";
    const io::keras::json cfg = io::keras::parse_json(*config, label);
    std::unique_ptr<Model> model = io::keras::model_from_json(cfg, label);
    if (compile)
      if (const std::string* training = tree.attr("", "training_config")) {
        const io::keras::json tc = io::keras::parse_json(*training, path + ": training_config");
        if (tc.is_object() && tc.contains("optimizer_config") && tc.contains("loss")) {
          io::keras::json cc = {{"optimizer", tc["optimizer_config"]},
                                {"loss", tc["loss"]},
                                {"metrics", tc.value("metrics", io::keras::json(nullptr))}};
          io::keras::compile_from_json(*model, cc, path + ": training_config");
        }
      }
    io::keras::weights_from_tree(*model, tree, path);
    return model;
  }
  throw InvalidArgument("load_model: '" + path + "' must end in .keras (Keras 3) or .h5 (legacy Keras 2)");
}

std::unique_ptr<Model> load_model_for_planning(const std::string& path) {
  const runtime::FileOperation op("loading " + path + " for planning");
  if (!path.ends_with(".keras")) return load_model(path, /*compile=*/false);  // Keras 2: the config is in the HDF5
  io::keras::Archive a = io::keras::read_archive(path, /*with_weights=*/false);
  io::keras::check_metadata(a.metadata, path);
  const std::string label = path + ": config.json";
  const io::keras::json config = io::keras::parse_json(a.config, label);
  std::unique_ptr<Model> model = io::keras::model_from_json(config, label);
  // The compile config too (optimizer and loss: what the step holds); compiling allocates nothing.
  if (has_compile_config(config)) io::keras::compile_from_json(*model, config["compile_config"], label);
  return model;
}

}  // namespace models
}  // namespace tk
