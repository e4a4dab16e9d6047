// A trainkit model made from a Keras model's config (the JSON a .keras file's config.json holds: model.to_json()),
// with what the Python bridge (trainkit/keras_bridge.py) needs: weights in and out in trainkit's layer order, the
// optimizer's variables in Keras' order, fit / evaluate / predict on NumPy arrays, and the memory plan.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "callbacks.h"
#include "trainkit/nn/model.h"

namespace tkpy {

struct FitArgs {
  int64_t batch_size = 32;  // tk::kAutoBatchSize for "auto"
  int epochs = 1;
  int verbose = -1;
  float validation_split = 0.0f;
  bool shuffle = true;
  int initial_epoch = 0;
  int64_t steps_per_epoch = 0;   // 0: one pass over the data (an infinite Dataset needs it)
  int64_t validation_steps = 0;  // 0: one pass over the validation data
  uint64_t seed = 0;
  // backup_dir=: trainkit's BackupAndRestore there (the CLI's --backup-dir / --backup-freq / --keep-backup).
  std::string backup_dir;
  int64_t backup_save_freq = 0;  // 0: every epoch; N: every N optimizer steps
  bool keep_backup = false;
  // keras.callbacks.TensorBoard(log_dir, histogram_freq, update_freq): trainkit's TensorBoard writer (scalars and
  // histograms as Keras writes them; Keras' own needs TensorFlow).
  std::string tensorboard_dir;
  int tensorboard_histogram_freq = 0;
  int64_t tensorboard_update_freq = 0;  // 0: "epoch"; N: every N steps
  // Keras' class_weight (tk::FitOptions::class_weight): class id -> weight; empty: none.
  std::map<int, float> class_weight;
};

class Bridge {
 public:
  // Builds the model, and compiles it from the config's compile_config when `compile` (InvalidArgument when the
  // config has none: an uncompiled Keras model). `label` names the model in every error.
  Bridge(const std::string& config_json, const std::string& label, bool compile);
  // The native API (trainkit/models.py): a model from a .keras / Keras 2 .h5 file (tk.models.load_model).
  static std::unique_ptr<Bridge> load(const std::string& path, bool compile);
  // model.compile(...): Keras' compile_config (optimizer, loss, metrics) as JSON; compiling again starts afresh.
  void compile(const std::string& compile_config_json, const std::string& label);
  // model.save / save_weights / load_weights (Keras 3's files).
  void save(const std::string& path) const { model_->save(path); }
  void save_weights(const std::string& path) const { model_->save_weights(path); }
  void load_weights(const std::string& path) { model_->load_weights(path); }
  // The model's Keras config (what a .keras file's config.json holds), and its parameter count.
  std::string to_json() const;
  int64_t count_params() const { return model_->count_params(); }
  std::string name() const { return model_->name(); }
  void set_device(const std::string& device);
  void set_dtype_policy(const std::string& policy) { model_->set_dtype_policy(policy); }
  bool compiled() const { return model_->optimizer() != nullptr; }
  // Per layer with weights, in trainkit's order (Model::get_weights): (layer name, [weight shapes]).
  nb::list weight_layout() const;
  std::vector<nb::object> get_weights() const;
  void set_weights(const std::vector<HostArray>& weights);
  // The optimizer's variables as Keras 3 lists them (optimizer.variables: iterations, learning_rate, then the slots
  // in Keras' order), as a .keras file's optimizer/vars hold them; None under loss scaling (not bridged).
  nb::object optimizer_variables() const;
  // The other way: Keras' optimizer.variables into the trainkit optimizer (so a second tk.fit continues the first's
  // Adam moments and iteration count), checked as a .keras file's optimizer state is (FormatError names what differs).
  void set_optimizer_variables(const std::vector<HostArray>& values);
  // The History's (epoch list, history dict, params dict). Interrupted (KeyboardInterrupt) when a signal arrived:
  // training stops at the next step boundary (no further callback runs, as a KeyboardInterrupt leaves Keras' fit),
  // the model holds the weights of the steps that finished. `callbacks`: None, or the Python dispatcher of the Keras
  // callbacks (trainkit/_callbacks.py: its batch_begin / batch_end say whether it has batch hooks); an exception one
  // of them raises leaves fit as is.
  // sample_weight / validation_sample_weight: Keras' per-row weights (tk::FitOptions), read in place.
  nb::tuple fit(const std::vector<HostArray>& x, const std::vector<HostArray>& y, const FitArgs& args,
                const std::optional<std::pair<std::vector<HostArray>, std::vector<HostArray>>>& validation_data,
                nb::object callbacks, const std::optional<HostArray>& sample_weight,
                const std::optional<HostArray>& validation_sample_weight);
  // model.fit(dataset): elements are batches (x..., y...); batch_size, shuffle and validation_split do not apply.
  nb::tuple fit_dataset(const tk::data::Dataset& dataset, const FitArgs& args,
                        const std::optional<tk::data::Dataset>& validation, nb::object callbacks);
  nb::dict evaluate_dataset(const tk::data::Dataset& dataset);
  std::vector<nb::object> predict_dataset(const tk::data::Dataset& dataset);
  nb::dict evaluate(const std::vector<HostArray>& x, const std::vector<HostArray>& y, int64_t batch_size,
                    const std::optional<HostArray>& sample_weight);
  std::vector<nb::object> predict(const std::vector<HostArray>& x, int64_t batch_size);
  tk::MemoryPlan memory_plan(int64_t batch_size) { return model_->memory_plan(batch_size); }
  int64_t largest_batch_that_fits(size_t bytes, int64_t cap) { return model_->largest_batch_that_fits(bytes, cap); }
  std::string summary() const;
  // The optimizer's current learning rate; set_learning_rate takes effect at the next step (ReduceLROnPlateau and
  // the other Keras callbacks that assign model.optimizer.learning_rate). Under a schedule the rate is the
  // schedule's, and setting it is a ValueError.
  float learning_rate() const;
  void set_learning_rate(float lr);
  bool has_learning_rate_schedule() const;

 private:
  explicit Bridge(std::unique_ptr<tk::Model> model) : model_(std::move(model)) {}
  // fit's options from `args`, with the Ctrl-C check, the backup, the Python callbacks and TensorBoard; the last two
  // are kept in `keras_callbacks` (released with the GIL held) and `signals` (its params hold the step count).
  tk::FitOptions fit_options(const FitArgs& args, nb::object callbacks, std::shared_ptr<PyCallbacks>& keras_callbacks,
                             std::shared_ptr<tk::Callback>& signals) const;
  nb::tuple history_tuple(const tk::History& h, const FitArgs& args, const tk::Callback& signals) const;

  std::unique_ptr<tk::Model> model_;
};

}  // namespace tkpy
