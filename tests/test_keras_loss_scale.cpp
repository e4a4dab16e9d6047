// Keras' LossScaleOptimizer in .keras files: files Keras 3.15.1 wrote (tests/fixtures/keras/gen_loss_scale.py) load
// with the scale, the counter and the inner optimizer's state; trainkit writes the same variables in the same layout
// (group for group, dataset for dataset), names the wrapper in the config when Keras' compile would not add it by
// itself, and a loaded model goes on scaling from where the file left off.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "fixture.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_weights_compare.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

std::string fixture_dir() { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/"; }

class KerasLossScale : public ::testing::Test {
 protected:
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
  std::map<std::string, Tensor> expect = testing::load_fixture(fixture_dir() + "lso_expect.txt");
};

using testing::max_abs_diff;

io::H5Tree weights_of(const std::string& path) {
  const io::keras::Archive a = io::keras::read_archive(path);
  return io::read_h5_tree_image(path, a.weights.data(), a.weights.size());
}

TEST_F(KerasLossScale, KerasFilesLoadWithTheScaleTheCounterAndTheInnerState) {
  for (const std::string name : {"lso_auto", "lso_explicit"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> m = models::load_model(fixture_dir() + name + ".keras");
    const float* state = expect[name + "_state"].data<float>();
    EXPECT_EQ(m->layer_compute_dtype(*m->layers()[m->layers().size() - 2]), DType::f16);  // the hidden Dense
    EXPECT_EQ(m->loss_scale(), state[0]);
    EXPECT_EQ(m->loss_scale_step_counter(), static_cast<int64_t>(state[1]));
    EXPECT_EQ(m->optimizer()->iterations(), static_cast<int64_t>(state[2]));
    EXPECT_EQ(m->optimizer()->name(), name == "lso_auto" ? "Adam" : "SGD");
    // float16 products: Keras' and trainkit's differ in the last bits of a float16.
    EXPECT_LE(max_abs_diff(m->predict(expect["x"], 8), expect[name + "_predict"]), 2e-3f);
  }
  // The explicit wrapper's options come from the config: 1024 initial, doubling after 3 finite steps.
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + "lso_explicit.keras");
  EXPECT_EQ(m->optimizer()->initial_loss_scale(), 1024.0f);
}

TEST_F(KerasLossScale, TrainkitWritesKerasLayoutAndConfig) {
  const fs::path dir = fs::temp_directory_path() / ("tk_lso_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string name : {"lso_auto", "lso_explicit"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> m = models::load_model(fixture_dir() + name + ".keras");
    const std::string path = (dir / (name + ".keras")).string();
    m->save(path);
    // Every group and dataset Keras wrote, with the same shapes, dtypes and values (nothing trained in between).
    const io::H5Tree keras = weights_of(fixture_dir() + name + ".keras"), mine = weights_of(path);
    testing::expect_same_weights(keras, mine, 0.0f);
    for (const char* g : {"optimizer/vars", "optimizer/inner_optimizer/vars"})
      EXPECT_EQ(keras.attrs.at(g).at("name"), mine.attrs.at(g).at("name")) << g;
    // The config: Keras' own compile wraps mixed_float16's optimizer (so it names Adam alone); other loss scaling is
    // written as the wrapper, as Keras writes it.
    const auto config = io::keras::json::parse(io::keras::read_archive(path).config);
    const auto want = io::keras::json::parse(io::keras::read_archive(fixture_dir() + name + ".keras").config);
    EXPECT_EQ(config["compile_config"]["optimizer"]["class_name"], want["compile_config"]["optimizer"]["class_name"]);
    if (name == "lso_explicit") {
      const auto& c = config["compile_config"]["optimizer"]["config"];
      EXPECT_EQ(c["initial_scale"], 1024.0);
      EXPECT_EQ(c["dynamic_growth_steps"], 3);
      EXPECT_EQ(c["inner_optimizer"]["class_name"], "SGD");
    }
    // And back: the same state.
    std::unique_ptr<Model> again = models::load_model(path);
    EXPECT_EQ(again->loss_scale(), m->loss_scale());
    EXPECT_EQ(again->loss_scale_step_counter(), m->loss_scale_step_counter());
  }
  fs::remove_all(dir);
}

TEST_F(KerasLossScale, ALoadedModelGoesOnScalingFromTheFilesState) {
  // Keras left the explicit file at scale 2048 with 1 finite step counted, doubling after 3: two more finite steps
  // double it to 4096 and reset the counter.
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + "lso_explicit.keras");
  m->train_on_batch({expect["x"]}, {expect["y"]});
  EXPECT_EQ(m->loss_scale(), 2048.0f);
  EXPECT_EQ(m->loss_scale_step_counter(), 2);
  m->train_on_batch({expect["x"]}, {expect["y"]});
  EXPECT_EQ(m->loss_scale(), 4096.0f);
  EXPECT_EQ(m->loss_scale_step_counter(), 0);
  EXPECT_EQ(m->optimizer()->iterations(), 6);
}

TEST_F(KerasLossScale, BadScaleVariablesAreOneClearError) {
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + "lso_auto.keras");
  io::H5Tree tree = weights_of(fixture_dir() + "lso_auto.keras");
  tree.datasets["optimizer/vars/3"] = Tensor::from_vector<float>(Shape{}, {-1.0f});
  try {
    io::keras::weights_from_tree(*m, tree, "bad.keras");
    FAIL() << "a negative loss scale was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("dynamic_scale"), std::string::npos) << e.what();
  }
  tree.datasets["optimizer/vars/3"] = Tensor::from_vector<int64_t>(Shape{}, {7});
  EXPECT_THROW(io::keras::weights_from_tree(*m, tree, "bad.keras"), FormatError);
  // Untouched by the failed loads.
  EXPECT_EQ(m->loss_scale(), 32768.0f);
  EXPECT_THROW(m->set_loss_scale_state(0.0f, 1), InvalidArgument);
}

}  // namespace
}  // namespace tk
