// The checks the Keras-made fixture families share (tests/test_text_cnn.cpp, test_rnn.cpp, test_transformer.cpp):
//   expect_near_keras(pred, r["predict"], 1e-4, "predict");                  // |got - want| <= tol * max(1, |want|)
//   if (out) { write_trainkit_fixture(*model, r["x"], out, "trainkit_lstm", "tests/test_rnn.cpp", "gen_rnn.py"); }
//   const json v = keras_verdict(kDir, "keras_loaded_trainkit_rnn.json", "gen_rnn.py", "lstm");  // Keras' word
//   expect_saves_as_committed(*model, kDir + "trainkit_lstm.keras");         // config equal, weights within 1e-6
//   std::unique_ptr<Model> back = saved_and_loaded(*model);                 // saved as .keras, loaded back
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_weights_compare.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/model.h"

namespace tk::testing {

// |got - want| <= tol * max(1, |want|) elementwise; prints the worst relative difference when tol > 0.
inline void expect_near_keras(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.data<float>()[i];
    const double d = std::abs(got.data<float>()[i] - w) / std::max(1.0, std::abs(w));
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, tol) << what << " (worst at " << at << ")";
  if (tol > 0) std::printf("  %-52s max |trainkit - keras| / max(1, |keras|) = %.3g\n", what.c_str(), worst);
}

inline double rel(double got, double want) { return std::abs(got - want) / std::max(1e-12, std::abs(want)); }

// Writes `name`.keras (the model as trainkit saves it) and `name`_predict.txt (x and the model's predictions, in the
// fixtures' text format) into `out`, for the generator's --check-trainkit to load in Keras.
inline void write_trainkit_fixture(Model& model, const Tensor& x, const std::string& out, const std::string& name,
                                   const std::string& test_file, const std::string& generator) {
  model.save(out + "/" + name + ".keras");
  std::ofstream f(out + "/" + name + "_predict.txt");
  f << "# trainkit's predictions (" << test_file << "; checked in Keras by " << generator << ")\n";
  f.precision(9);
  const Tensor pred = model.predict(x);
  for (const auto& [n, t] : std::vector<std::pair<std::string, Tensor>>{{"x", x}, {"predict", pred}}) {
    const bool ints = t.dtype() == DType::i32;
    f << "tensor " << n << (ints ? " int32 " : " float32 ") << t.shape().rank();
    for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
    f << "\n";
    for (int64_t i = 0; i < t.numel(); ++i)
      f << (i ? " " : "") << (ints ? double(t.data<int32_t>()[i]) : double(t.data<float>()[i]));
    f << "\n";
  }
}

// Keras' verdict on trainkit's file for `model` (the committed JSON the generator's --check-trainkit writes), after
// the checks every family makes: Keras loaded it, it names this trainkit's format, predictions within 1e-5.
inline io::keras::json keras_verdict(const std::string& dir, const std::string& file, const std::string& generator,
                                     const std::string& model) {
  std::ifstream in(dir + file);
  EXPECT_TRUE(in) << file << " is missing: run " << generator << " --check-trainkit";
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  io::keras::json verdict = io::keras::json::parse(ss.str())[model];
  EXPECT_EQ(verdict["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict["trainkit_format"], io::kKerasFormatVersion);
  EXPECT_LE(verdict["max_abs_diff_predict"].get<double>(), 1e-5);
  return verdict;
}

// The model saved now has the committed file's config and its weights within 1e-6: the committed file (the one
// Keras' verdict is about) is still what trainkit writes.
inline void expect_saves_as_committed(Model& model, const std::string& committed_path) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tk_saves_as_committed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model.save((dir / "now.keras").string());
  const auto committed = io::keras::read_archive(committed_path);
  const auto now = io::keras::read_archive((dir / "now.keras").string());
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  io::H5Tree a = io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size());
  io::H5Tree b = io::read_h5_tree_image("now", now.weights.data(), now.weights.size());
  expect_same_weights(a, b, 1e-6f);
  fs::remove_all(dir);
}

// The model saved as .keras into a temporary folder and loaded back (the folder removed): the round trip.
inline std::unique_ptr<Model> saved_and_loaded(const Model& model) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tk_round_trip_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "back.keras").string();
  model.save(path);
  std::unique_ptr<Model> back = models::load_model(path);
  fs::remove_all(dir);
  return back;
}

}  // namespace tk::testing
