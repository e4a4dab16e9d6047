// Reads the text fixtures in tests/fixtures/ (written by the gen_*.py scripts there):
//   tensor <name> <float32|int32> <rank> <dims...>
//   <values on one line>
#pragma once
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "trainkit/core/tensor.h"

namespace tk::testing {

inline std::map<std::string, Tensor> load_fixture(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open fixture " + path);
  std::map<std::string, Tensor> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string tag, name, dtype;
    int rank = 0;
    head >> tag >> name >> dtype >> rank;
    if (tag != "tensor") throw FormatError("fixture " + path + ": unexpected line '" + line.substr(0, 40) + "'");
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (int64_t& d : dims) head >> d;
    std::getline(in, line);
    std::istringstream values(line);
    Tensor t(Shape(dims), dtype == "int32" ? DType::i32 : DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DType::i32)
        values >> t.data<int32_t>()[i];
      else
        values >> t.data<float>()[i];
    }
    if (!values) throw FormatError("fixture " + path + ": tensor " + name + " has too few values");
    out.emplace(name, t);
  }
  return out;
}

inline std::string fixture_path(const std::string& name) {
  return std::string(TK_SOURCE_DIR) + "/tests/fixtures/" + name;
}

}  // namespace tk::testing
