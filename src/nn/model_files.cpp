// Model's files: Keras 3 archives and weights (io/keras*.cpp) and ONNX (io/onnx_export.cpp). A model on a GPU trains
// device copies of its weights: they come back before a save reads the weights, and go out after a load wrote them.
#include "io/onnx_export.h"
#include "nn/training/trainer.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/model.h"

namespace tk {

void Model::save(const std::string& path) const {
  trainer_->sync_host_weights();
  io::save_keras(*this, path);
}

void Model::save_weights(const std::string& path) const {
  trainer_->sync_host_weights();
  io::save_keras_weights(*this, path);
}

void Model::load_weights(const std::string& path) {
  io::load_keras_weights(*this, path);
  trainer_->weights_changed_on_host();
}

void Model::export_onnx(const std::string& path) { io::export_onnx(*this, path); }

}  // namespace tk
