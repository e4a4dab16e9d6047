// Keras 3 files: fixtures written by Keras 3.15.1 (tests/fixtures/keras/gen_keras_fixtures.py) load and
// predict, evaluate and resume training as Keras does; trainkit's own files round-trip; and the file
// trainkit wrote that Keras loaded (keras_loaded_trainkit_file.json) is still what trainkit writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixture.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_weights_compare.h"
#include "trainkit/io/keras.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

std::string fixture_dir() { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/"; }

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tk_keras_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

using testing::max_abs_diff;

// The same groups and datasets; values within 1e-6 (a training step's float rounding may differ by machine).
void expect_same_weights(const io::H5Tree& a, const io::H5Tree& b) { testing::expect_same_weights(a, b, 1e-6f); }

void write_predictions(const std::string& path, const Tensor& x, const Tensor& pred) {
  std::ofstream f(path);
  f << "# trainkit's predictions (tests/test_keras_files.cpp; checked in Keras by gen_keras_fixtures.py)\n";
  for (const auto& [n, t] : std::vector<std::pair<std::string, Tensor>>{{"x", x}, {"predict", pred}}) {
    f << "tensor " << n << " float32 " << t.shape().rank();
    for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
    f << "\n";
    f.precision(9);
    for (int64_t i = 0; i < t.numel(); ++i) f << (i ? " " : "") << t.data<float>()[i];
    f << "\n";
  }
}

// Loads <name>.keras and checks it against what Keras computed with it (see the generator).
void check_fixture(const std::string& name, int64_t batch, const std::string& ext = ".keras") {
  auto expect = testing::load_fixture(fixture_dir() + name + "_expect.txt");
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + name + ext);
  ASSERT_TRUE(m->optimizer());
  EXPECT_EQ(m->optimizer()->name(), "Adam");
  EXPECT_EQ(m->optimizer()->iterations(), 2);
  EXPECT_LE(max_abs_diff(m->predict(expect["x"], batch), expect["predict"]), 1e-5f);
  Logs ev = m->evaluate(expect["x"], expect["y"], {.batch_size = batch});
  EXPECT_NEAR(ev.get("loss"), expect["evaluate"].data<float>()[0], 1e-5);
  EXPECT_NEAR(ev.get("accuracy"), expect["evaluate"].data<float>()[1], 1e-6);
  // Resume: the first step's loss is on the loaded weights; the second shows the restored Adam state.
  const float* want = expect["resume_losses"].data<float>();
  double l1 = m->train_on_batch({expect["x_step1"]}, {expect["y_step1"]}).get("loss");
  EXPECT_NEAR(l1, want[0], 1e-5);
  EXPECT_LE(max_abs_diff(m->predict(expect["x"], batch), expect["predict_after_step1"]), 1e-5f);
  double l2 = m->train_on_batch({expect["x_step2"]}, {expect["y_step2"]}).get("loss");
  EXPECT_NEAR(l2, want[1], 1e-5);
}

TEST(KerasFixtures, DefaultMlpPredictsEvaluatesAndResumesAsKeras) { check_fixture("mlp", 8); }
TEST(KerasFixtures, FunctionalCnnWithBatchNormPredictsEvaluatesAndResumesAsKeras) { check_fixture("cnn", 4); }

// The legacy Keras 2 layout (model_config, model_weights/<layer>/<weight>, optimizer_weights/), as Keras 3
// writes it for a .h5 path.
TEST(KerasFixtures, LegacyH5PredictsEvaluatesAndResumesAsKeras) { check_fixture("legacy", 4, ".h5"); }

// Keras 2's own config syntax: inbound_nodes as [[layer, node, tensor, kwargs]], and a Sequential whose first
// layer carries batch_input_shape.
TEST(KerasFixtures, Keras2ConfigSyntax) {
  auto expect = testing::load_fixture(fixture_dir() + "legacy_expect.txt");
  io::H5Tree tree = io::read_h5_tree_file(fixture_dir() + "legacy.h5");
  io::keras::json cfg = io::keras::json::parse(*tree.attr("", "model_config"));
  for (auto& l : cfg["config"]["layers"]) {
    io::keras::json old = io::keras::json::array();
    for (const auto& node : l["inbound_nodes"]) {
      io::keras::json entries = io::keras::json::array();
      for (const auto& t : node["args"]) {
        auto h = t["config"]["keras_history"];
        entries.push_back({h[0], h[1], h[2], io::keras::json::object()});
      }
      old.push_back(entries);
    }
    l["inbound_nodes"] = old;
  }
  std::unique_ptr<Model> m = io::keras::model_from_json(cfg, "keras2");
  m->load_weights(fixture_dir() + "legacy.h5");
  EXPECT_LE(max_abs_diff(m->predict(expect["x"], 4), expect["predict"]), 1e-5f);
  // Sequential, Keras 2 style: no InputLayer, batch_input_shape on the first Dense.
  io::keras::json seq = {{"class_name", "Sequential"},
                         {"config",
                          {{"name", "sequential"},
                           {"layers",
                            {{{"class_name", "Dense"},
                              {"config",
                               {{"name", "d1"},
                                {"units", 16},
                                {"activation", "relu"},
                                {"dtype", "float32"},
                                {"batch_input_shape", {nullptr, 20}}}}},
                             {{"class_name", "Dense"}, {"config", {{"name", "d2"}, {"units", 3}}}}}}}}};
  std::unique_ptr<Model> s = io::keras::model_from_json(seq, "keras2");
  s->set_weights(m->get_weights());
  EXPECT_LE(max_abs_diff(s->predict(expect["x"], 4), expect["predict"]), 1e-5f);
}

TEST(KerasFixtures, LoadWithoutCompileHasNoOptimizer) {
  auto expect = testing::load_fixture(fixture_dir() + "cnn_expect.txt");
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + "cnn.keras", /*compile=*/false);
  EXPECT_FALSE(m->optimizer());
  EXPECT_LE(max_abs_diff(m->predict(expect["x"], 4), expect["predict"]), 1e-5f);
}

// The file Keras loaded in step 2 of the generator (keras_loaded_trainkit_file.json) is what trainkit
// writes today: same config and same weights. With TK_KERAS_FIXTURE_OUT set, (re)writes it instead.
TEST(KerasFixtures, TrainkitWrittenFileKerasLoadedIsStillWhatTrainkitWrites) {
  auto expect = testing::load_fixture(fixture_dir() + "cnn_expect.txt");
  std::unique_ptr<Model> m = models::load_model(fixture_dir() + "cnn.keras");
  m->train_on_batch({expect["x_step1"]}, {expect["y_step1"]});  // trainkit's own step: state trainkit computed
  const Tensor pred = m->predict(expect["x"], 4);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    m->save(std::string(out) + "/trainkit_cnn.keras");
    write_predictions(std::string(out) + "/trainkit_cnn_predict.txt", expect["x"], pred);
    GTEST_SKIP() << "wrote trainkit_cnn.keras into " << out;
  }
  // Keras' verdict on the committed file, for the format version trainkit writes now.
  std::ifstream in(fixture_dir() + "keras_loaded_trainkit_file.json");
  ASSERT_TRUE(in) << "keras_loaded_trainkit_file.json is missing: run step 2 of gen_keras_fixtures.py";
  std::stringstream ss;
  ss << in.rdbuf();
  auto verdict = io::keras::json::parse(ss.str());
  EXPECT_EQ(verdict["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict["trainkit_format"], io::kKerasFormatVersion);
  EXPECT_LE(verdict["max_abs_diff_predict"].get<double>(), 1e-5);
  // The committed file against a fresh one: same config.json, same weights and optimizer state.
  fs::path dir = temp_dir("rewrite");
  m->save((dir / "now.keras").string());
  auto committed = io::keras::read_archive(fixture_dir() + "trainkit_cnn.keras");
  auto now = io::keras::read_archive((dir / "now.keras").string());
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  io::H5Tree a = io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size());
  io::H5Tree b = io::read_h5_tree_image("now", now.weights.data(), now.weights.size());
  EXPECT_EQ(a.groups, b.groups);
  ASSERT_EQ(a.datasets.size(), b.datasets.size());
  expect_same_weights(a, b);
  fs::remove_all(dir);
}

// Every layer class trainkit has, in one Functional model (seeded: the same weights on every machine).
std::unique_ptr<Model> all_layers_model() {
  clear_session();
  utils::set_random_seed(5);
  using namespace layers;
  KerasTensor in = tk::Input({16, 16, 3});
  KerasTensor h = Rescaling(0.5f, 0.1f)(in);
  h = ZeroPadding2D(1)(h);
  h = Conv2D(4, 3, "relu", {.padding = "same"})(h);
  h = BatchNormalization()(h);
  h = SpatialDropout2D(0.1f)(h);
  h = MaxPooling2D(2)(h);
  KerasTensor a = Conv2D(4, 1)(h);
  KerasTensor b = Activation("tanh")(h);
  KerasTensor u = UpSampling2D(2)(Add()(std::vector<KerasTensor>{a, b}));
  KerasTensor c = Concatenate()(std::vector<KerasTensor>{GlobalAveragePooling2D()(u), GlobalMaxPooling2D()(u),
                                                         Flatten()(AveragePooling2D(3)(u))});
  KerasTensor out = Dense(5)(Dropout(0.2f)(Flatten()(Reshape({8, 19})(c))));
  auto m = std::make_unique<Model>(in, out, "all_layers");
  m->compile(optimizers::SGD({.learning_rate = 0.01f, .momentum = 0.9f}), "mse");
  return m;
}

Tensor all_layers_input() {
  Tensor x(Shape{2, 16, 16, 3}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 101.0f;
  return x;
}

// trainkit -> trainkit for every layer class, and (step 2 of the generator) trainkit -> Keras.
TEST(KerasFixtures, EveryLayerClassRoundTripsAndKerasLoadsIt) {
  std::unique_ptr<Model> m = all_layers_model();
  const Tensor x = all_layers_input();
  const Tensor pred = m->predict(x, 2);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    m->save(std::string(out) + "/trainkit_all_layers.keras");
    write_predictions(std::string(out) + "/trainkit_all_layers_predict.txt", x, pred);
  }
  fs::path dir = temp_dir("all");
  const std::string path = (dir / "all.keras").string();
  m->save(path);
  std::unique_ptr<Model> back = models::load_model(path);
  EXPECT_EQ(max_abs_diff(back->predict(x, 2), pred), 0.0f);
  EXPECT_EQ(back->optimizer()->name(), "SGD");
  // Same config when saved again; and the same as the file Keras loaded.
  back->save((dir / "again.keras").string());
  EXPECT_EQ(io::keras::json::parse(io::keras::read_archive(path).config),
            io::keras::json::parse(io::keras::read_archive((dir / "again.keras").string()).config));
  const auto committed = io::keras::read_archive(fixture_dir() + "trainkit_all_layers.keras");
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(io::keras::read_archive(path).config));
  const auto now = io::keras::read_archive(path);
  expect_same_weights(io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size()),
                      io::read_h5_tree_image("now", now.weights.data(), now.weights.size()));
  fs::remove_all(dir);
}

// trainkit -> trainkit: a saved model resumes exactly like the original continuing.
TEST(KerasFiles, SaveLoadResumesBitForBit) {
  auto expect = testing::load_fixture(fixture_dir() + "cnn_expect.txt");
  std::unique_ptr<Model> a = models::load_model(fixture_dir() + "cnn.keras");
  a->train_on_batch({expect["x_step1"]}, {expect["y_step1"]});
  fs::path dir = temp_dir("resume");
  const std::string path = (dir / "m.keras").string();
  a->save(path);
  std::unique_ptr<Model> b = models::load_model(path);
  EXPECT_EQ(b->optimizer()->iterations(), a->optimizer()->iterations());
  const double la = a->train_on_batch({expect["x_step2"]}, {expect["y_step2"]}).get("loss");
  const double lb = b->train_on_batch({expect["x_step2"]}, {expect["y_step2"]}).get("loss");
  EXPECT_EQ(la, lb);
  std::vector<Tensor> wa = a->get_weights(), wb = b->get_weights();
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_EQ(std::memcmp(wa[i].raw(), wb[i].raw(), wa[i].nbytes()), 0) << i;
  fs::remove_all(dir);
}

TEST(KerasFiles, WeightsH5RoundTripAndKerasLayout) {
  auto expect = testing::load_fixture(fixture_dir() + "mlp_expect.txt");
  std::unique_ptr<Model> a = models::load_model(fixture_dir() + "mlp.keras");
  fs::path dir = temp_dir("weights");
  const std::string path = (dir / "w.weights.h5").string();
  a->save_weights(path);
  io::H5Tree t = io::read_h5_tree_file(path);
  ASSERT_TRUE(t.dataset("layers/dense_1/vars/0"));
  EXPECT_EQ(t.dataset("layers/dense_1/vars/0")->shape(), Shape({256, 128}));
  EXPECT_EQ(*t.attr("layers/dense_1/vars", "name"), a->layers()[2]->name);
  EXPECT_EQ(t.children("optimizer/vars").size(), 2u + 2u * 6u);  // iterations, lr, (m, v) per variable
  Sequential b({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  b.load_weights(path);
  EXPECT_LE(max_abs_diff(b.predict(expect["x"], 8), expect["predict"]), 1e-5f);
  // Weights from a .keras archive too.
  Sequential c({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  c.load_weights(fixture_dir() + "mlp.keras");
  EXPECT_LE(max_abs_diff(c.predict(expect["x"], 8), expect["predict"]), 1e-5f);
  fs::remove_all(dir);
}

// BatchNormalization(synchronized=True) is saved and loaded with Keras' key (a Keras 3 config option).
TEST(KerasFixtures, SynchronizedBatchNormalizationKeepsItsOption) {
  clear_session();
  auto m = std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({4}), layers::BatchNormalization({.name = "bn_sync", .synchronized = true}),
                            layers::BatchNormalization({.name = "bn_local"})});
  fs::path dir = temp_dir("bn_sync");
  const std::string path = (dir / "bn.keras").string();
  m->save(path);
  std::unique_ptr<Model> back = models::load_model(path);
  const LayerConfig sync_config = back->get_layer("bn_sync")->get_config();
  const LayerConfig local_config = back->get_layer("bn_local")->get_config();
  const LayerConfig::Value* sync = sync_config.find("synchronized");
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->b);
  const LayerConfig::Value* local = local_config.find("synchronized");
  EXPECT_TRUE(local == nullptr || !local->b);  // written only when true (as the fixtures' Keras writes it)
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk

// Keras' to_snake_case (names of the weights file's layer groups); expected values printed by Python's re.sub
// with Keras' two patterns.
TEST(KerasNames, SnakeCaseMatchesKerasRegexes) {
  const std::vector<std::pair<std::string, std::string>> cases{{"Conv2D", "conv2d"},
                                                               {"BatchNormalization", "batch_normalization"},
                                                               {"MaxPooling2D", "max_pooling2d"},
                                                               {"GlobalAveragePooling2D", "global_average_pooling2d"},
                                                               {"UpSampling2D", "up_sampling2d"},
                                                               {"SpatialDropout2D", "spatial_dropout2d"},
                                                               {"ReLU", "re_lu"},
                                                               {"HTTPResponse", "http_response"},
                                                               {"Dense", "dense"},
                                                               {"InputLayer", "input_layer"},
                                                               {"AbCdEf", "ab_cd_ef"}};
  for (const auto& [in, out] : cases) EXPECT_EQ(tk::io::keras::snake_case(in), out) << in;
}
