// Attention (Luong) and AdditiveAttention (Bahdanau) (issue 32). The Keras-made fixtures luong_attention (dot scores
// with scale and concat scores with scale and a causal mask, under Embedding(mask_zero=True) masks) and
// additive_attention (a separate key, then an unscaled causal Attention) are checked with the other sequence fixtures
// in test_rnn.cpp (predict, evaluate, a step, two epochs, files Keras loads). Here: the gradient against finite
// differences, the masks' exact consequences, refused options, and a model built in C++ with dropout training,
// saving and loading back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "fixture.h"
#include "io/keras_internal.h"
#include "keras_fixture_files.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

Tensor wave(Shape s, float f) {
  Tensor t(std::move(s), DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::sin(f * float(i) + 0.3f);
  return t;
}

LayerConfig causal() { return LayerConfig{}.set("use_causal_mask", true); }

// Every weight's gradient (one SGD step of learning rate 1: before - after) against central differences of the loss.
void expect_gradients_match(Model& m, const Tensor& x, const Tensor& y, int min_checked) {
  std::vector<Tensor> before;
  for (const LayerPtr& l : m.layers())
    for (const Weight& w : l->weights()) before.push_back(w.value.clone());
  auto loss = [&] { return double(m.evaluate(x, y, {.batch_size = x.dim(0)}).get("loss")); };
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
      for (int64_t i = 0; i < w.value.numel(); ++i) {
        float& v = w.value.data<float>()[i];
        const float v0 = v, eps = 1e-2f;
        v = v0 + eps;
        const double up = loss();
        v = v0 - eps;
        const double down = loss();
        v = v0;
        const double fd = (up - down) / (2.0 * eps);
        EXPECT_NEAR(grads[k].data<float>()[i], fd, 2e-3 + 1e-2 * std::abs(fd)) << w.name << "[" << i << "]";
        ++checked;
      }
      ++k;
    }
  EXPECT_GT(checked, min_checked);
}

// Dot scores with a scale, concat scores with both scalars under a causal mask, and AdditiveAttention's (d,) scale
// with a separate key: every weight, the scalars included, against finite differences.
TEST(AttentionLayers, GradientsMatchFiniteDifferences) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(9);
  auto in = tk::Input({5, 3});
  auto q = Dense(4)(in);
  auto v = Dense(4, "tanh")(in);
  auto a = Attention({.use_scale = true})({q, v});
  auto c = Attention({.use_scale = true, .score_mode = "concat"})({a, v}, causal());
  auto d = AdditiveAttention()({c, v, Dense(4)(in)});
  Model m(in, Dense(1)(GlobalAveragePooling1D()(d)));
  m.compile(optimizers::SGD({.learning_rate = 1.0f}), "mse");
  expect_gradients_match(m, wave(Shape{3, 5, 3}, 0.41f), wave(Shape{3, 1}, 1.7f), 55);
}

// The value's mask hides padded keys (the real steps' outputs equal those of the unpadded sequence), the query's
// zeroes padded outputs; the causal mask makes step i depend on steps <= i only.
TEST(AttentionLayers, MasksHideThePaddingAndTheFuture) {
  using namespace layers;
  clear_session();
  LayerPtr embed = Embedding(9, 4, {.mask_zero = true});
  LayerPtr att = Attention({.use_scale = true, .score_mode = "concat"});
  auto ids = tk::Input({6}, "ids", DType::i32);
  auto e = embed(ids);
  Model padded(ids, att({e, e}));
  auto ids4 = tk::Input({4}, "ids4", DType::i32);
  auto e4 = embed(ids4);
  Model plain(ids4, att({e4, e4}));
  Tensor x(Shape{2, 6}, DType::i32), x4(Shape{2, 4}, DType::i32);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t s = 0; s < 6; ++s) {
      const int32_t id = s < 4 ? static_cast<int32_t>(1 + (r * 5 + s * 3) % 8) : 0;
      x.data<int32_t>()[r * 6 + s] = id;
      if (s < 4) x4.data<int32_t>()[r * 4 + s] = id;
    }
  const Tensor yp = padded.predict(x), y4 = plain.predict(x4);  // (2, 6, 4), (2, 4, 4)
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t s = 0; s < 6; ++s)
      for (int64_t f = 0; f < 4; ++f) {
        const float got = yp.data<float>()[(r * 6 + s) * 4 + f];
        if (s < 4)
          EXPECT_NEAR(got, y4.data<float>()[(r * 4 + s) * 4 + f], 1e-6) << r << " " << s;
        else
          EXPECT_EQ(got, 0.0f) << "a padded query step";
      }
  // Causal: changing the last step changes no earlier output.
  clear_session();
  auto in = tk::Input({5, 3});
  Model m(in, AdditiveAttention()({in, in}, causal()));
  Tensor a = wave(Shape{1, 5, 3}, 0.7f), b = a.clone();
  for (int f = 0; f < 3; ++f) b.data<float>()[4 * 3 + f] += 1.0f;
  const Tensor ya = m.predict(a), yb = m.predict(b);
  for (int64_t i = 0; i < 4 * 3; ++i) EXPECT_EQ(ya.data<float>()[i], yb.data<float>()[i]) << i;
  EXPECT_NE(ya.data<float>()[4 * 3], yb.data<float>()[4 * 3]);
}

// Options trainkit does not run, and bad shapes, are clear errors naming the layer.
TEST(AttentionLayers, RefusedOptionsAndShapesNameTheLayer) {
  using namespace layers;
  clear_session();
  const auto what = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a tk::Error";
    return {};
  };
  EXPECT_NE(what([] { Attention({.score_mode = "general", .name = "att"}); }).find("'att'"), std::string::npos);
  EXPECT_THROW(Attention({.dropout = 1.0f}), InvalidArgument);
  auto q = tk::Input({4, 3}), v = tk::Input({5, 2});
  const std::string dims = what([&] { Attention({.name = "att2"})({q, v}); });  // key = value: 2 features, query 3
  EXPECT_NE(dims.find("'att2'"), std::string::npos) << dims;
  const std::string scores = what([&] {
    Attention({.name = "att3"})({q, q}, LayerConfig{}.set("return_attention_scores", true));
  });
  EXPECT_NE(scores.find("return_attention_scores"), std::string::npos) << scores;
  io::keras::json bad = {
      {"module", "keras.layers"}, {"class_name", "Attention"}, {"config", {{"name", "a"}, {"score_mode", "general"}}}};
  EXPECT_THROW(io::keras::layer_from_json(bad, "m.keras"), Unsupported);
}

// Dropout on the attention probabilities trains (training only: predict is deterministic); a model built in C++
// saves a Keras file and loads back with the same predictions.
TEST(AttentionLayers, DropoutTrainsAndTheCppApiRoundTrips) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(4);
  auto ids = tk::Input({6}, "tokens", DType::i32);
  auto e = Embedding(12, 4, {.mask_zero = true})(ids);
  auto a = Attention({.use_scale = true, .dropout = 0.3f})({e, e}, causal());
  auto b = AdditiveAttention({.dropout = 0.2f})({a, e});
  Model m(ids, Dense(2, "softmax")(GlobalAveragePooling1D()(b)));
  m.compile(optimizers::SGD({.learning_rate = 0.1f}), "sparse_categorical_crossentropy");
  Tensor x(Shape{4, 6}, DType::i32), y(Shape{4}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = (i % 6) < 3 + (i / 6) % 3 ? int32_t(1 + i % 11) : 0;
  for (int i = 0; i < 4; ++i) y.data<int32_t>()[i] = i % 2;
  History h = m.fit(x, y, {.batch_size = 4, .epochs = 2, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
  const Tensor p = m.predict(x);
  testing::expect_near_keras(m.predict(x), p, 0.0, "predict twice");
  const fs::path dir = fs::temp_directory_path() / ("tk_attention_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  m.save((dir / "m.keras").string());
  std::unique_ptr<Model> back = models::load_model((dir / "m.keras").string());
  testing::expect_near_keras(back->predict(x), p, 0.0, "predict after the round trip");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk
