// The pieces of Keras 3 serialization (src/io/keras_*.cpp): model and compile configs as JSON, and the
// weights layout as an H5Tree. `label` names the file (and member) in every error.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "io/hdf5_tree.h"
#include "io/temp_file.h"
#include "trainkit/nn/model.h"

namespace tk::io::keras {

using json = nlohmann::json;

// ---- keras_layers.cpp: one layer <-> its Keras object {"module","class_name","config",...}
// `policy`: the dtype policy the layer runs under in its model (Model::layer_dtype_policy), written as Keras 3's
// DTypePolicy object.
json layer_to_json(const Layer& layer, const std::string& policy = "float32");
json dtype_policy_json(const std::string& policy);
// Keras' serialized object: {"module", "class_name", "config", "registered_name": null}.
json keras_object_json(const std::string& module, const std::string& class_name, const json& config);
// One LayerConfig value as Keras writes it (a layer's option, or a call's keyword option in an inbound node).
json config_value_json(const LayerConfig::Value& v);
// The dtype policy a layer is made with on load (the file's: a DTypePolicy object or a name; the global policy
// when absent). Unsupported for a policy trainkit does not run.
// Everything is checked (class, every option, dtype policy) before the layer is created; a layer whose policy in
// the file differs from the global one gets it as its own (Layer::set_dtype_policy).
LayerPtr layer_from_json(const json& obj, const std::string& label);
// The dtype policy a layer's or model's config names ("dtype": a DTypePolicy object or a name); empty when it names
// none. FormatError for another shape, Unsupported for a policy trainkit does not run.
std::string policy_in_config(const json& config, const std::string& where);
// Keras' snake_case of a class name: "BatchNormalization" -> "batch_normalization", "Conv2D" -> "conv2d".
std::string snake_case(const std::string& class_name);
// s in lower case (ASCII letters): an optimizer's default name, "Adam" -> "adam".
std::string ascii_lower(std::string s);

// ---- keras_config.cpp: models and compile configs
json model_to_json(const Model& model);  // with compile_config when compiled
std::unique_ptr<Model> model_from_json(const json& obj, const std::string& label);
void compile_from_json(Model& model, const json& compile_config, const std::string& label);
// A loss as compile_config holds it (a name or a Keras loss object) and back, as Keras writes it.
Loss loss_from_json(const json& j, const std::string& label);
json loss_to_json(const Loss& loss);
// A metric as compile_config holds it (a name or a Keras metric object) and back, as Keras writes it.
Metric metric_from_json(const json& j, const std::string& label);
json metric_to_json(const Metric& m);

// A float32 config value as Keras writes it (the shortest decimal that reads back to the same float: 0.001, not
// 0.0010000000474974513), in keras_config.cpp.
json float_json(float v);

// ---- keras_schedules.cpp: an optimizer's learning_rate when it is a keras.optimizers.schedules object
optimizers::schedules::LearningRateSchedulePtr schedule_from_json(const json& j, const std::string& label);
json schedule_to_json(const optimizers::schedules::LearningRateSchedule& schedule, const std::string& label);

// ---- keras_nested.cpp: a model in a Functional model's layer list (called like a layer: tk::call_model)
bool is_nested_model(const json& layer);
// Built from its config; trainable=False in it freezes all its layers, as Keras.
std::shared_ptr<const Model> nested_model_from_json(const json& obj, const std::string& label);
// Its calls from the entry's inbound_nodes: one output per call; `training` read from the call's kwargs.
std::vector<KerasTensor> call_nested_model(const std::shared_ptr<const Model>& model, const json* inbound,
                                           const std::string& label,
                                           const std::function<KerasTensor(const json&, const std::string&)>& resolve);

// ---- slot_views.cpp: the optimizer's state as it is, for streaming saves
// One optimizer slot: its live tensor (shared, not copied; on the model's device), or, before the slot exists,
// its shape and initial value (written as HDF5 fill values: nothing of its size is allocated).
struct SlotView {
  Tensor value;
  Shape shape = {};
  float fill = 0.0f;
};
// Per trainable weight, optimizer()->slots_per_variable() views. Requires compile().
std::vector<std::vector<SlotView>> optimizer_slot_views(const Model& model);

// ---- keras_weights.cpp: Keras 3's model.weights.h5 layout (and Keras 2's model_weights for loading)
// The tree shares the weights' and slots' memory (nothing is copied): write it before the model trains again.
H5Tree weights_to_tree(const Model& model);
// Checks every variable's presence, count and shape before assigning any (optimizer state too when the
// tree has it and the model is compiled with the same optimizer).
void weights_from_tree(Model& model, const H5Tree& tree, const std::string& label);

// ---- keras_archive.cpp: the zip
struct Archive {
  std::string metadata, config, weights;  // the three members' bytes
};
// with_weights false: model.weights.h5 is not read (planning, and loading: extract_weights_member streams it).
Archive read_archive(const std::string& path, bool with_weights = true);
// The archive's model.weights.h5 copied into `out` in 64 KiB pieces (no copy of it in memory), its CRC checked.
void extract_weights_member(const std::string& path, TempFile& out);
Archive read_archive_bytes(const std::string& label, const void* data, size_t size);
// Keras version in metadata.json must be 3.x: FormatError/Unsupported otherwise.
void check_metadata(const std::string& metadata, const std::string& label);
std::string write_archive(const Archive& a);
// The archive written to the file `out` (a temporary the caller commits), model.weights.h5 copied from
// `weights_file` by libzip in small pieces. IoError naming `label` when it cannot be written.
void write_archive_file(const std::string& metadata, const std::string& config, const std::string& weights_file,
                        const std::string& out, const std::string& label);

// Parses JSON, FormatError naming label and the byte offset on failure.
json parse_json(const std::string& text, const std::string& label);

}  // namespace tk::io::keras
