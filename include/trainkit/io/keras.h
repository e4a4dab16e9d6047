// Keras 3 files in and out: `.keras` models, `.weights.h5` weights, and legacy Keras 2 `.h5` files to load.
//
//   model.save("m.keras");                                   // config, compile config, weights, optimizer state
//   std::unique_ptr<tk::Model> m = tk::models::load_model("m.keras");           // compiled, resumes training
//   auto inference = tk::models::load_model("m.keras", /*compile=*/false);      // weights only, no optimizer
//   model.save_weights("w.weights.h5");  model.load_weights("w.weights.h5");   // Keras 3's HDF5 layout
//   model.load_weights("old_keras2.h5");                                         // Keras 2 model_weights/...
//
// A `.keras` file is a zip of metadata.json, config.json and model.weights.h5 (Keras 3's layout:
// layers/<snake_case class name with a counter>/vars/<i>, optimizer/vars/<i>), readable by keras.saving.
// load_model in Keras 3 and written atomically (a crash leaves the previous file). Loading checks everything
// before building anything: an unknown layer class, an option trainkit does not implement, a missing or
// misshapen variable, a damaged zip or HDF5 file, or a file from a Keras version other than 3 is one
// tk::FormatError / tk::Unsupported naming the file, the layer and what is supported — never a half-loaded
// model. HDF5 is read in a helper process (a damaged file that crashes libhdf5 becomes an error).
#pragma once
#include <memory>
#include <string>

#include "trainkit/nn/model.h"

namespace tk {

namespace io {
// The Keras version whose layout trainkit writes and has been checked against (metadata.json's keras_version).
inline constexpr const char* kKerasVersionWritten = "3.15.1";
// trainkit's own version of what it writes into .keras files (metadata.json "trainkit_format").
inline constexpr int kKerasFormatVersion = 1;

void save_keras(const Model& model, const std::string& path);
void save_keras_weights(const Model& model, const std::string& path);
// .weights.h5, .keras (its weights) or a legacy Keras 2 .h5; optimizer state too when both have it.
void load_keras_weights(Model& model, const std::string& path);
}  // namespace io

namespace models {
// A model from a .keras file (or a legacy Keras 2 .h5 with its model_config). compile = true restores the
// compile config and the optimizer state; false leaves the model uncompiled (inference, or compile anew).
std::unique_ptr<Model> load_model(const std::string& path, bool compile = true);
// The model a .keras file describes, compiled as its compile_config says (optimizer and loss, whose slots a plan
// counts but compiling does not allocate), without reading its weights or optimizer state: what a memory plan needs
// (`trainkit plan --model m.keras`). Its weights hold their initializers' values, and nothing but them is
// allocated, so a model that would not fit can still be planned. (A legacy .h5 keeps its config inside the HDF5
// file: it is loaded whole, uncompiled.)
std::unique_ptr<Model> load_model_for_planning(const std::string& path);
}  // namespace models

}  // namespace tk
