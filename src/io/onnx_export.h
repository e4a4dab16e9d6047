// The inference program of a model as an ONNX file (Model::export_onnx; onnx_export.cpp).
#pragma once
#include <string>

#include "trainkit/nn/model.h"

namespace tk::io {

// IR 8, opset 17, the batch axis dynamic, tensors channels_last as the model's; written atomically. Unsupported names
// the first op it cannot express. Builds the model if needed.
void export_onnx(Model& model, const std::string& path);

}  // namespace tk::io
