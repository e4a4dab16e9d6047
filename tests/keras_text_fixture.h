// Reads the Keras fixtures written by tests/fixtures/keras/*/gen_*.py: one record per line, "NAME D0 D1 ... : V0 V1
// ..." (float32 printed with %.9g), '#' lines and empty lines skipped. Records become float32 host tensors by name.
//
//   auto f = tk::testing::load_keras_text(TK_SOURCE_DIR "/tests/fixtures/keras/activations/activations_expect.txt");
#pragma once
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/core/error.h"
#include "trainkit/core/tensor.h"

namespace tk::testing {

inline std::map<std::string, Tensor> load_keras_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open fixture " + path);
  std::map<std::string, Tensor> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    std::istringstream head(line.substr(0, colon)), values(line.substr(colon + 1));
    std::string name;
    head >> name;
    std::vector<int64_t> dims;
    for (int64_t d; head >> d;) dims.push_back(d);
    Tensor t{Shape(dims), DType::f32};
    for (int64_t i = 0; i < t.numel(); ++i) values >> t.data<float>()[i];
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace tk::testing
