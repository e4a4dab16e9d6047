// Recurrent layers from Keras 3.15.1 files (issue 32): SimpleRNN, LSTM, GRU (reset_after True and False) and
// Bidirectional (concat, sum, ave, mul), return_sequences and go_backwards. Each fixture model loads, predicts and
// evaluates as Keras did, takes one SGD step (momentum starts at zero: the weights after it check every gradient),
// one epoch of fit as Keras did, and a second epoch from the file Keras saved after its first (weights and momentum
// slots read in Keras' order); it is saved back, and the files trainkit wrote after its epoch loaded in Keras with
// the same predictions and trained a second epoch there as Keras' own file did (keras_loaded_trainkit_rnn.json).
// Fixtures: tests/fixtures/keras/rnn/ (gen_rnn.py beside them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "fixture.h"
#include "graph/autodiff.h"
#include "graph/tensor_ops.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_fixture_files.h"
#include "keras_weights_compare.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/rnn/";

using testing::rel;
constexpr auto expect_near = testing::expect_near_keras;

// Every weight of `model` against the fixture's <prefix>/<layer>/<index> (gen_rnn.py's names), in Keras' order.
int expect_weights(const Model& model, std::map<std::string, Tensor>& r, const std::string& prefix, double tol) {
  int checked = 0;
  for (const LayerPtr& layer : model.layers())
    for (size_t i = 0; i < layer->weights().size(); ++i) {
      const std::string key = prefix + "/" + layer->name + "/" + std::to_string(i);
      EXPECT_TRUE(r.count(key)) << key;
      if (!r.count(key)) continue;
      expect_near(layer->weights()[i].value, r[key], tol, key + " (" + layer->weights()[i].name + ")");
      ++checked;
    }
  return checked;
}

const char* const kModels[] = {
    "bilstm", "gru",       "simple_rnn", "forecaster",      "masked_bilstm",     "masked_forecaster",
    "tagger", "td_tagger", "td_frames",  "luong_attention", "additive_attention"};

class KerasRnn : public ::testing::TestWithParam<const char*> {};

TEST_P(KerasRnn, LoadsMatchesKerasTrainsAndSavesBack) {
  const std::string name = GetParam();
  auto r = testing::load_fixture(kDir + name + "_expect.txt");
  const Tensor& x = r["x"];
  const Tensor& y = r["y"];
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  EXPECT_GT(expect_weights(*model, r, "before", 0.0), 3);

  const Tensor pred = model->predict(x);
  expect_near(pred, r["predict"], 1e-4, "predict");
  const Logs ev = model->evaluate(x, y, {.batch_size = x.dim(0)});
  EXPECT_LE(rel(ev.get("loss"), r["evaluate_loss"].data<float>()[0]), 1e-4) << ev.get("loss");
  // The metrics compiled with it (tagger: accuracy weighted by the output's mask, as the loss is).
  const bool accuracy = r.count("evaluate_accuracy") > 0;
  if (accuracy) EXPECT_NEAR(ev.get("accuracy"), r["evaluate_accuracy"].data<float>()[0], 1e-6);

  // One step: momentum starts at zero, so the weights after it are before - 0.1 * gradient.
  const Logs& step = model->train_on_batch({x}, {y});
  EXPECT_LE(rel(step.get("loss"), r["step_loss"].data<float>()[0]), 1e-4);
  if (accuracy) EXPECT_NEAR(step.get("accuracy"), r["step_accuracy"].data<float>()[0], 1e-6);
  expect_weights(*model, r, "step", 1e-5);

  // One epoch of fit (3 batches of 8, in order) from the saved weights.
  std::unique_ptr<Model> fresh = models::load_model(kDir + name + ".keras");
  History h = fresh->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_LE(rel(h.history.at("loss").at(0), r["epoch_loss"].data<float>()[0]), 1e-4);
  if (accuracy) EXPECT_NEAR(h.history.at("accuracy").at(0), r["epoch_accuracy"].data<float>()[0], 1e-6);
  expect_weights(*fresh, r, "epoch", 1e-4);

  // A second epoch from Keras' file after its first: the momentum slots are read in Keras' order (the forward and
  // backward layers' same-shaped variables included), or the weights would part from Keras'.
  std::unique_ptr<Model> resumed = models::load_model(kDir + name + "_epoch.keras");
  History h2 = resumed->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_LE(rel(h2.history.at("loss").at(0), r["epoch2_loss"].data<float>()[0]), 1e-4);
  if (accuracy) EXPECT_NEAR(h2.history.at("accuracy").at(0), r["epoch2_accuracy"].data<float>()[0], 1e-6);
  expect_weights(*resumed, r, "epoch2", 1e-4);

  // Saved back: the same predictions.
  std::unique_ptr<Model> back = testing::saved_and_loaded(*fresh);
  expect_near(back->predict(x), fresh->predict(x), 0.0, "predict after the round trip");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasRnn, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// The files trainkit writes after its own epoch, which Keras loaded and trained on (gen_rnn.py --check-trainkit wrote
// the verdict keras_loaded_trainkit_rnn.json), are what trainkit writes today: same config.json, same weights and
// optimizer variables. With TK_KERAS_FIXTURE_OUT set, (re)writes trainkit_<model>.keras and its predictions there.
TEST(KerasRnnFiles, TrainkitWrittenFilesKerasLoadedAreStillWhatTrainkitWrites) {
  const char* out = std::getenv("TK_KERAS_FIXTURE_OUT");
  for (const char* c : kModels) {
    const std::string name = c;
    SCOPED_TRACE(name);
    auto r = testing::load_fixture(kDir + name + "_expect.txt");
    std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
    model->fit(r["x"], r["y"], {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    const std::string file = "trainkit_" + name;
    if (out) {
      testing::write_trainkit_fixture(*model, r["x"], out, file, "tests/test_rnn.cpp", "gen_rnn.py");
      continue;
    }
    const auto verdict = testing::keras_verdict(kDir, "keras_loaded_trainkit_rnn.json", "gen_rnn.py", name);
    EXPECT_LE(verdict["max_abs_diff_second_epoch_weights_vs_keras"].get<double>(), 1e-4);
    testing::expect_saves_as_committed(*model, kDir + file + ".keras");
  }
  if (out) GTEST_SKIP() << "wrote the trainkit_*.keras files into " << out;
}

// The gradient autodiff derives through the unrolled steps against central differences of the loss: a
// Bidirectional LSTM (one direction go_backwards) and a GRU without reset_after, one SGD step of learning rate 1
// giving the gradient (before - after), float32 losses differenced in double.
TEST(RecurrentLayers, GradientsMatchFiniteDifferences) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(5);
  auto in = tk::Input({5, 3});
  auto h = Bidirectional(LSTM(4, {.return_sequences = true}))(in);
  h = GRU(3, {.reset_after = false})(h);
  Model m(in, Dense(1)(h));
  m.compile(optimizers::SGD({.learning_rate = 1.0f}), "mse");
  Tensor x(Shape{4, 5, 3}, DType::f32), y(Shape{4, 1}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.7f * float(i));
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = std::cos(1.3f * float(i));
  std::vector<Tensor> before;
  for (const LayerPtr& l : m.layers())
    for (const Weight& w : l->weights()) before.push_back(w.value.clone());
  auto loss = [&] { return double(m.evaluate(x, y, {.batch_size = 4}).get("loss")); };
  m.train_on_batch({x}, {y});
  std::vector<Tensor> grads;
  size_t k = 0;
  for (const LayerPtr& l : m.layers())
    for (Weight& w : l->weights()) {
      Tensor g = before[k].clone();
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] -= w.value.data<float>()[i];
      grads.push_back(g);
      std::copy(before[k].data<float>(), before[k].data<float>() + g.numel(), w.value.data<float>());
      ++k;
    }
  k = 0;
  int checked = 0;
  for (const LayerPtr& l : m.layers())
    for (Weight& w : l->weights()) {
      for (int64_t i = 0; i < w.value.numel(); i += 5) {  // every fifth element
        float& v = w.value.data<float>()[i];
        const float v0 = v;
        const float eps = 1e-2f;
        v = v0 + eps;
        const double up = loss();
        v = v0 - eps;
        const double down = loss();
        v = v0;
        const double fd = (up - down) / (2.0 * eps);
        const double g = grads[k].data<float>()[i];
        EXPECT_NEAR(g, fd, 2e-3 + 1e-2 * std::abs(fd)) << w.name << "[" << i << "]";
        ++checked;
      }
      ++k;
    }
  EXPECT_GT(checked, 40);
}

// The gradients of T slices of one value (an RNN's per-step slices of its input projection) are joined into one Concat
// (zeros in the gap), not T full-size pads summed by T - 1 Adds; overlapping slices still add.
TEST(RecurrentLayers, SliceGradientsJoinIntoOneConcat) {
  for (const bool overlap : {false, true}) {
    graph::Graph g;
    Tensor storage = Tensor::zeros(Shape{7, 3});
    const int v = g.variable("w", storage);
    graph::OpBuilder b{g, nullptr, "t"};
    int loss = -1;
    for (int64_t t = 0; t < 6; ++t) {  // rows 0..5 (row 6 unused: a zero block); with overlap rows t..t+1
      const int s = graph::ops::slice(b, v, 0, t, overlap ? 2 : 1);
      const int r =
          graph::ops::reduce(b, graph::ReduceFn::sum, graph::ops::unary(b, graph::UnaryFn::square, s), {0, 1}, false);
      loss = loss < 0 ? r : graph::ops::binary(b, graph::BinaryFn::add, loss, r);
    }
    const int n = g.size();
    const int grad = graph::gradients(g, {loss}, {v})[0];
    int adds = 0;
    for (int i = n; i < g.size(); ++i) adds += g[i].op == graph::Op::Add && g[i].name == "grad/accumulate";
    EXPECT_EQ(g[grad].op, overlap ? graph::Op::Add : graph::Op::Concat) << overlap;
    EXPECT_EQ(adds, overlap ? 5 : 0) << overlap;
    if (!overlap) {
      EXPECT_EQ(g[grad].inputs.size(), 7u);  // six pieces and the zero row
    }
  }
}

// Keras' defaults for fresh weights: the recurrent kernel (units, 4 * units) orthogonal (its rows orthonormal), the
// LSTM bias zeros but the forget gate's ones (unit_forget_bias), the kernel glorot_uniform (within its limit).
TEST(RecurrentLayers, FreshWeightsFollowKerasInitializers) {
  using namespace layers;
  clear_session();
  LayerPtr lstm = LSTM(5);
  (*lstm)(tk::Input({3, 7}));
  const Tensor& k = lstm->weights()[0].value;  // (7, 20)
  const Tensor& u = lstm->weights()[1].value;  // (5, 20)
  const Tensor& bias = lstm->weights()[2].value;
  ASSERT_EQ(u.shape(), Shape({5, 20}));
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < 20; ++c) dot += double(u.data<float>()[i * 20 + c]) * u.data<float>()[j * 20 + c];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
    }
  const float limit = std::sqrt(6.0f / (7 + 20));
  for (int64_t i = 0; i < k.numel(); ++i) EXPECT_LE(std::abs(k.data<float>()[i]), limit);
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(bias.data<float>()[i], i >= 5 && i < 10 ? 1.0f : 0.0f) << i;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A sequence longer or shorter than the model's static length names both shapes.
TEST(RecurrentLayers, ASequenceOfAnotherLengthNamesBothLengths) {
  std::unique_ptr<Model> model = models::load_model(kDir + "forecaster.keras");
  for (int64_t steps : {20, 8}) {
    const Tensor x = Tensor::zeros(Shape{2, steps, 2});
    const std::string e = what_of([&] { model->predict(x); });
    EXPECT_NE(e.find("(None, 16, 2)"), std::string::npos) << e;
    EXPECT_NE(e.find("(2, " + std::to_string(steps) + ", 2)"), std::string::npos) << e;
    EXPECT_THROW(model->predict(x), InvalidArgument);
  }
}

// Options trainkit does not run are clear errors naming the layer and the option.
TEST(RecurrentLayers, RefusedOptionsNameTheLayerAndTheOption) {
  using namespace layers;
  const std::string st = what_of([] { GRU(4, {.stateful = true, .name = "enc"}); });
  EXPECT_NE(st.find("'enc'"), std::string::npos) << st;
  EXPECT_NE(st.find("stateful"), std::string::npos) << st;
  EXPECT_THROW(GRU(4, {.stateful = true}), Unsupported);
  EXPECT_THROW(LSTM(0), InvalidArgument);
  EXPECT_THROW(LSTM(4, {.dropout = 1.0f}), InvalidArgument);
  EXPECT_THROW(Bidirectional(Dense(3)), InvalidArgument);
  EXPECT_THROW(Bidirectional(LSTM(3), {.merge_mode = "max"}), InvalidArgument);
  EXPECT_THROW(Bidirectional(LSTM(3), {.backward_layer = LSTM(3)}), InvalidArgument);  // both go forward

  // recurrent_dropout: predicts (inference ignores it), refuses to train.
  clear_session();
  auto in = tk::Input({4, 2});
  Model m(in, Dense(1)(SimpleRNN(3, {.recurrent_dropout = 0.2f, .name = "rnn"})(in)));
  m.compile(optimizers::SGD(), "mse");
  const Tensor x = Tensor::zeros(Shape{2, 4, 2});
  EXPECT_NO_THROW(m.predict(x));
  const std::string rd = what_of([&] { m.fit(x, Tensor::zeros(Shape{2, 1}), {.epochs = 1, .verbose = 0}); });
  EXPECT_NE(rd.find("'rnn'"), std::string::npos) << rd;
  EXPECT_NE(rd.find("recurrent_dropout"), std::string::npos) << rd;

  // From a Keras config: stateful and Bidirectional's merge_mode=None (return_state: tests/test_rnn_states.cpp).
  io::keras::json lstm = {{"module", "keras.layers"},
                          {"class_name", "LSTM"},
                          {"config", {{"name", "enc"}, {"units", 4}, {"stateful", true}}}};
  const std::string f = what_of([&] { io::keras::layer_from_json(lstm, "m.keras"); });
  EXPECT_NE(f.find("'enc'"), std::string::npos) << f;
  EXPECT_NE(f.find("stateful"), std::string::npos) << f;
  lstm["config"]["stateful"] = false;
  io::keras::json bi = {{"module", "keras.layers"},
                        {"class_name", "Bidirectional"},
                        {"config", {{"name", "bi"}, {"merge_mode", nullptr}, {"layer", lstm}}}};
  EXPECT_THROW(io::keras::layer_from_json(bi, "m.keras"), Unsupported);
  bi["config"]["merge_mode"] = "concat";
  EXPECT_EQ(io::keras::layer_from_json(bi, "m.keras")->class_name(), "Bidirectional");
}

// dropout: one mask per sequence in training; predict is deterministic; a model built in C++ saves and loads back.
TEST(RecurrentLayers, DropoutTrainsAndTheCppApiRoundTrips) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(11);
  Sequential m({layers::Input({6}, "tokens", DType::i32), Embedding(12, 4),
                Bidirectional(GRU(5, {.dropout = 0.3f, .return_sequences = true}), {.merge_mode = "ave"}),
                Bidirectional(SimpleRNN(3), {.merge_mode = "mul"}), Dense(2)});
  m.compile(optimizers::SGD({.learning_rate = 0.1f}), "sparse_categorical_crossentropy");
  Tensor ids(Shape{4, 6}, DType::i32);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int32_t>()[i] = static_cast<int32_t>((i * 5) % 12);
  Tensor labels(Shape{4}, DType::i32);
  for (int i = 0; i < 4; ++i) labels.data<int32_t>()[i] = i % 2;
  History h = m.fit(ids, labels, {.batch_size = 4, .epochs = 2, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
  const Tensor a = m.predict(ids);
  expect_near(m.predict(ids), a, 0.0, "predict twice");
  const fs::path dir = fs::temp_directory_path() / ("tk_rnn_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  m.save((dir / "m.keras").string());
  std::unique_ptr<Model> back = models::load_model((dir / "m.keras").string());
  expect_near(back->predict(ids), a, 0.0, "predict after the round trip");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk
