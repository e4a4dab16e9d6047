// Recurrent layers with several outputs and initial states (issue 32): return_state and initial_state of LSTM, GRU,
// SimpleRNN and Bidirectional, as Keras 3.15.1 computes them, in models with several inputs and outputs. Each fixture
// model (an encoder-decoder whose encoder LSTM's final h and c start the decoder LSTM; a GRU with return_state whose
// state starts a SimpleRNN; a Bidirectional LSTM's states starting a Bidirectional GRU; every output of one LSTM as
// model outputs) loads, predicts every output and evaluates as Keras did, takes one SGD step as Keras did (momentum
// starts at zero: the weights after it check every gradient through the states), one epoch of fit, and saves back;
// Keras loaded the files trainkit wrote with the same predictions (keras_loaded_trainkit_states.json).
// Fixtures: tests/fixtures/keras/rnn_states/ (gen_rnn_states.py beside them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "fixture.h"
#include "io/keras_internal.h"
#include "keras_fixture_files.h"
#include "nn/layers/masks.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/rnn_states/";

using testing::rel;
constexpr auto expect_near = testing::expect_near_keras;

// The fixture's tensors <prefix>0, <prefix>1, ... (x0, y0, predict0).
std::vector<Tensor> numbered(std::map<std::string, Tensor>& r, const std::string& prefix) {
  std::vector<Tensor> out;
  while (r.count(prefix + std::to_string(out.size()))) out.push_back(r[prefix + std::to_string(out.size())]);
  return out;
}

// Every weight of `model` against the fixture's <prefix>/<layer>/<index>, in Keras' order.
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

const char* const kModels[] = {"seq2seq", "gru_state", "bidirectional_state", "lstm_outputs"};

class KerasRnnStates : public ::testing::TestWithParam<const char*> {};

TEST_P(KerasRnnStates, LoadsMatchesKerasTrainsAndSavesBack) {
  const std::string name = GetParam();
  auto r = testing::load_fixture(kDir + name + "_expect.txt");
  const std::vector<Tensor> x = numbered(r, "x"), y = numbered(r, "y"), want = numbered(r, "predict");
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  ASSERT_EQ(model->inputs().size(), x.size());
  ASSERT_EQ(model->outputs().size(), want.size());
  EXPECT_GT(expect_weights(*model, r, "before", 0.0), 2);

  const std::vector<Tensor> pred = model->predict(x);
  ASSERT_EQ(pred.size(), want.size());
  for (size_t i = 0; i < pred.size(); ++i) expect_near(pred[i], want[i], 1e-4, "predict " + std::to_string(i));
  const Logs ev = model->evaluate(x, y, {.batch_size = x[0].dim(0)});
  EXPECT_LE(rel(ev.get("loss"), r["evaluate_loss"].data<float>()[0]), 1e-4) << ev.get("loss");

  // One step: momentum starts at zero, so the weights after it are before - 0.1 * gradient (through the states).
  const Logs& step = model->train_on_batch(x, y);
  EXPECT_LE(rel(step.get("loss"), r["step_loss"].data<float>()[0]), 1e-4);
  expect_weights(*model, r, "step", 1e-5);

  // One epoch of fit (3 batches of 8, in order) from the saved weights.
  std::unique_ptr<Model> fresh = models::load_model(kDir + name + ".keras");
  History h = fresh->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_LE(rel(h.history.at("loss").at(0), r["epoch_loss"].data<float>()[0]), 1e-4);
  expect_weights(*fresh, r, "epoch", 1e-4);

  // Saved back: the same predictions, every output.
  std::unique_ptr<Model> back = testing::saved_and_loaded(*fresh);
  const std::vector<Tensor> a = fresh->predict(x), b = back->predict(x);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) expect_near(b[i], a[i], 0.0, "predict after the round trip");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasRnnStates, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// trainkit_<name>.keras and trainkit_<name>_predict.txt (x0.., predict0..) into `out`, for the generator's
// --check-trainkit.
void write_trainkit_files(Model& model, const std::vector<Tensor>& x, const std::string& out, const std::string& name) {
  model.save(out + "/" + name + ".keras");
  std::ofstream f(out + "/" + name + "_predict.txt");
  f << "# trainkit's predictions (tests/test_rnn_states.cpp; checked in Keras by gen_rnn_states.py)\n";
  f.precision(9);
  std::vector<std::pair<std::string, Tensor>> all;
  for (size_t i = 0; i < x.size(); ++i) all.emplace_back("x" + std::to_string(i), x[i]);
  const std::vector<Tensor> pred = model.predict(x);
  for (size_t i = 0; i < pred.size(); ++i) all.emplace_back("predict" + std::to_string(i), pred[i]);
  for (const auto& [n, t] : all) {
    const bool ints = t.dtype() == DType::i32;
    f << "tensor " << n << (ints ? " int32 " : " float32 ") << t.shape().rank();
    for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
    f << "\n";
    for (int64_t i = 0; i < t.numel(); ++i)
      f << (i ? " " : "") << (ints ? double(t.data<int32_t>()[i]) : double(t.data<float>()[i]));
    f << "\n";
  }
}

// The files trainkit writes after its own epoch, which Keras loaded (gen_rnn_states.py --check-trainkit wrote the
// verdict), are what trainkit writes today. With TK_KERAS_FIXTURE_OUT set, (re)writes them there.
TEST(KerasRnnStatesFiles, TrainkitWrittenFilesKerasLoadedAreStillWhatTrainkitWrites) {
  const char* out = std::getenv("TK_KERAS_FIXTURE_OUT");
  for (const char* c : kModels) {
    const std::string name = c;
    SCOPED_TRACE(name);
    auto r = testing::load_fixture(kDir + name + "_expect.txt");
    std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
    model->fit(numbered(r, "x"), numbered(r, "y"), {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    const std::string file = "trainkit_" + name;
    if (out) {
      write_trainkit_files(*model, numbered(r, "x"), out, file);
      continue;
    }
    const auto verdict = testing::keras_verdict(kDir, "keras_loaded_trainkit_states.json", "gen_rnn_states.py", name);
    EXPECT_EQ(verdict["outputs"].get<size_t>(), model->outputs().size());
    testing::expect_saves_as_committed(*model, kDir + file + ".keras");
  }
  if (out) GTEST_SKIP() << "wrote the trainkit_*.keras files into " << out;
}

// The gradient autodiff derives through the states against central differences of the loss: an encoder LSTM going
// backwards over masked steps hands h and c to a decoder LSTM, a Bidirectional GRU's states start a SimpleRNN and a
// second GRU; one SGD step of learning rate 1 gives the gradient (before - after), float32 losses differenced in
// double.
TEST(RecurrentStates, GradientsThroughTheStatesMatchFiniteDifferences) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(7);
  auto enc_in = tk::Input({5, 3});
  auto dec_in = tk::Input({4, 2});
  const std::vector<KerasTensor> enc =
      LSTM(4, {.return_state = true, .go_backwards = true}).call_all({Masking(0.0f)(enc_in)});
  KerasTensor dec = LSTM(4, {.return_sequences = true})({dec_in, enc[1], enc[2]});
  const std::vector<KerasTensor> bi = Bidirectional(GRU(3, {.return_state = true})).call_all({dec});
  KerasTensor r = SimpleRNN(3)({dec, bi[1]});
  KerasTensor g = GRU(3, {.reset_after = false})({dec, bi[2]});
  Model m({enc_in, dec_in}, {Dense(1)(Concatenate()({bi[0], r, g}))});
  m.compile(optimizers::SGD({.learning_rate = 1.0f}), "mse");
  Tensor x0(Shape{4, 5, 3}, DType::f32), x1(Shape{4, 4, 2}, DType::f32), y(Shape{4, 1}, DType::f32);
  for (int64_t i = 0; i < x0.numel(); ++i) x0.data<float>()[i] = i % 15 >= 12 ? 0.0f : std::sin(0.7f * float(i));
  for (int64_t i = 0; i < x1.numel(); ++i) x1.data<float>()[i] = std::cos(0.3f * float(i));
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = std::cos(1.3f * float(i));
  const std::vector<Tensor> xs{x0, x1}, ys{y};
  std::vector<Tensor> before;
  for (const LayerPtr& l : m.layers())
    for (const Weight& w : l->weights()) before.push_back(w.value.clone());
  auto loss = [&] { return double(m.evaluate(xs, ys, {.batch_size = 4}).get("loss")); };
  m.train_on_batch(xs, ys);
  std::vector<Tensor> grads;
  size_t k = 0;
  for (const LayerPtr& l : m.layers())
    for (Weight& w : l->weights()) {
      Tensor gr = before[k].clone();
      for (int64_t i = 0; i < gr.numel(); ++i) gr.data<float>()[i] -= w.value.data<float>()[i];
      grads.push_back(gr);
      std::copy(before[k].data<float>(), before[k].data<float>() + gr.numel(), w.value.data<float>());
      ++k;
    }
  k = 0;
  int checked = 0, encoder = 0;
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
        const double gv = grads[k].data<float>()[i];
        EXPECT_NEAR(gv, fd, 2e-3 + 1e-2 * std::abs(fd)) << w.name << "[" << i << "]";
        ++checked;
        // The encoder reaches the loss only through its states: its gradient must not be zero.
        if (l->name == enc[0].node->layer->name && std::abs(fd) > 1e-4) ++encoder;
      }
      ++k;
    }
  EXPECT_GT(checked, 60);
  EXPECT_GT(encoder, 3);
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Model(inputs, [output, h, c]) of one LSTM call predicts every output: the sequence (in processing order, as Keras
// returns it with go_backwards), h its last step, c the cell; a masked step keeps the state (h is the last unmasked
// step's output). Saved and loaded back, the config reads outputs 1 and 2 of the node; the errors name the layer.
TEST(RecurrentStates, OneLayersOutputsAreModelOutputs) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(3);
  auto in = tk::Input({6, 2});
  LayerPtr lstm = LSTM(3, {.return_sequences = true, .return_state = true, .go_backwards = true, .name = "enc"});
  const std::vector<KerasTensor> outs = lstm.call_all({Masking(0.0f)(in)});
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].shape(), Shape({-1, 6, 3}));
  EXPECT_EQ(outs[2].shape(), Shape({-1, 3}));
  Model m(std::vector<KerasTensor>{in}, outs);
  Tensor x(Shape{2, 6, 2}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.9f * float(i) + 0.2f);
  for (int64_t j = 0; j < 2; ++j) x.data<float>()[6 * 2 + j] = 0.0f;  // sample 1's step 0: masked (processed last)
  const std::vector<Tensor> p = m.predict(std::vector<Tensor>{x});
  ASSERT_EQ(p.size(), 3u);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t u = 0; u < 3; ++u) {
      // The sequence's last step (sample 1: it repeats the step before, masked) is the state h.
      const float last = p[0].data<float>()[(n * 6 + 5) * 3 + u];
      EXPECT_EQ(p[1].data<float>()[n * 3 + u], last) << n << "," << u;
      if (n == 1) EXPECT_EQ(last, p[0].data<float>()[(n * 6 + 4) * 3 + u]);
      EXPECT_NE(p[2].data<float>()[n * 3 + u], last);
    }
  // Saved: outputs 1 and 2 of node 0 of 'enc'; loaded back: the same three predictions.
  const io::keras::json config = io::keras::model_to_json(m);
  EXPECT_EQ(config["config"]["output_layers"][2], io::keras::json::array({"enc", 0, 2})) << config.dump();
  std::unique_ptr<Model> back = testing::saved_and_loaded(m);
  const std::vector<Tensor> q = back->predict(std::vector<Tensor>{x});
  ASSERT_EQ(q.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_near(q[i], p[i], 0.0, "output " + std::to_string(i) + " after the round trip");

  // A layer with several outputs called for one; initial states of another count or shape.
  const std::string one = what_of([&] { LSTM(3, {.return_state = true, .name = "multi"})(in); });
  EXPECT_NE(one.find("'multi'"), std::string::npos) << one;
  EXPECT_NE(one.find("call_all"), std::string::npos) << one;
  const std::string count = what_of([&] { LSTM(3, {.name = "dec"})({in, outs[1]}); });
  EXPECT_NE(count.find("'dec'"), std::string::npos) << count;
  EXPECT_NE(count.find("initial_state"), std::string::npos) << count;
  const std::string shape = what_of([&] { GRU(4, {.name = "g4"})({in, outs[1]}); });
  EXPECT_NE(shape.find("'g4'"), std::string::npos) << shape;
  EXPECT_NE(shape.find("(None, 4)"), std::string::npos) << shape;
  EXPECT_THROW(Bidirectional(GRU(3))({in, outs[1]}), InvalidArgument);  // two states: forward's and backward's
  EXPECT_THROW(Dense(2)({in, outs[1]}), InvalidArgument);               // no state argument
}

// A config that reads an output a node does not have is a FormatError naming both.
TEST(RecurrentStates, AnOutputIndexTheNodeDoesNotHaveIsAFormatError) {
  const auto archive = io::keras::read_archive(kDir + "seq2seq.keras");
  io::keras::json config = io::keras::json::parse(archive.config);
  for (auto& l : config["config"]["layers"])
    if (l["name"] == "decoder") l["inbound_nodes"][0]["kwargs"]["initial_state"][1]["config"]["keras_history"][2] = 3;
  const std::string e = what_of([&] { io::keras::model_from_json(config, "seq2seq.keras"); });
  EXPECT_NE(e.find("'encoder'"), std::string::npos) << e;
  EXPECT_NE(e.find("output 3"), std::string::npos) << e;
  EXPECT_THROW(io::keras::model_from_json(config, "seq2seq.keras"), FormatError);
}

}  // namespace
}  // namespace tk
