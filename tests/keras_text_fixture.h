// Reads the Keras fixtures written by tests/fixtures/keras/*/gen_*.py: one record per line, "NAME D0 D1 ... : V0 V1
// ..." (float32 printed with %.9g), '#' lines and empty lines skipped. Records become float32 host tensors by name.
//
//   auto f = tk::testing::load_keras_text(TK_SOURCE_DIR "/tests/fixtures/keras/activations/activations_expect.txt");
#pragma once
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
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

// One fixture file, read once, its records by name (a missing name throws, naming it):
//   const tk::testing::KerasTextFixture fx(kDir + "constraints_expect.txt");
//   const Tensor& x = fx.at("dense/x");   float loss = fx.scalar("dense/fit/loss");
class KerasTextFixture {
 public:
  explicit KerasTextFixture(std::string path) : path_(std::move(path)) {}
  const Tensor& at(const std::string& key) const {
    if (records_.empty()) records_ = load_keras_text(path_);
    auto it = records_.find(key);
    if (it == records_.end()) throw IoError("no record '" + key + "' in fixture " + path_);
    return it->second;
  }
  float scalar(const std::string& key) const { return at(key).data<float>()[0]; }

 private:
  std::string path_;
  mutable std::map<std::string, Tensor> records_;
};

}  // namespace tk::testing
