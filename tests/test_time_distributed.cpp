// TimeDistributed (issue 32): the Keras-made fixtures td_tagger (TimeDistributed(Dense) on a masked sequence, the mask
// passed on to an LSTM and to the loss) and td_frames (TimeDistributed Conv2D, MaxPooling2D, Flatten over frames) are
// checked with the other sequence fixtures in test_rnn.cpp (predict, evaluate, a step, two epochs, files Keras loads).
// Here: the gradient against finite differences, the steps folded into the batch give what the wrapped layer gives
// step by step, the refused wrapped layers, and a model built in C++ saving and loading back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
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

// The gradient autodiff derives through the fold and unfold, against central differences of the loss (one SGD step
// of learning rate 1 gives the gradient: before - after; float32 losses differenced in double).
TEST(TimeDistributed, GradientsMatchFiniteDifferences) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(7);
  auto in = tk::Input({3, 5, 5, 2});
  auto h = TimeDistributed(Conv2D(3, 3, "tanh"))(in);  // (N, 3, 3, 3, 3)
  h = TimeDistributed(Flatten())(h);                   // (N, 3, 27)
  h = TimeDistributed(Dense(2, "tanh"))(h);            // (N, 3, 2)
  Model m(in, Dense(1)(Flatten()(h)));
  m.compile(optimizers::SGD({.learning_rate = 1.0f}), "mse");
  const Tensor x = wave(Shape{4, 3, 5, 5, 2}, 0.37f), y = wave(Shape{4, 1}, 1.3f);
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
      for (int64_t i = 0; i < w.value.numel(); i += 4) {
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
  EXPECT_GT(checked, 30);
}

// Folding the steps into the batch is the wrapped layer applied to each step: the same Dense (shared weights) on one
// step's (N, d) input gives that step's slice.
TEST(TimeDistributed, EachStepIsTheWrappedLayersOutput) {
  using namespace layers;
  clear_session();
  LayerPtr dense = Dense(3, "relu");
  auto seq = tk::Input({4, 5});
  Model td(seq, TimeDistributed(dense)(seq));
  auto one = tk::Input({5});
  Model step(one, dense(one));  // the same layer, so the same weights
  const Tensor x = wave(Shape{2, 4, 5}, 0.9f);
  const Tensor y = td.predict(x);  // (2, 4, 3)
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  for (int64_t t = 0; t < 4; ++t) {
    Tensor xt(Shape{2, 5}, DType::f32);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t d = 0; d < 5; ++d) xt.data<float>()[n * 5 + d] = x.data<float>()[(n * 4 + t) * 5 + d];
    const Tensor yt = step.predict(xt);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t u = 0; u < 3; ++u)
        EXPECT_EQ(y.data<float>()[(n * 4 + t) * 3 + u], yt.data<float>()[n * 3 + u]) << "step " << t;
  }
  EXPECT_EQ(td.layers().back()->weights().size(), 2u);  // the wrapped Dense's kernel and bias, once
}

// Layers whose math folding would change (batch statistics, the step mask Keras hands them per step) are refused.
TEST(TimeDistributed, RefusedLayersAndShapesAreClearErrors) {
  using namespace layers;
  clear_session();
  const auto what = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected tk::InvalidArgument";
    return {};
  };
  const std::string bn = what([] { TimeDistributed(BatchNormalization(), "td"); });
  EXPECT_NE(bn.find("'td'"), std::string::npos) << bn;
  EXPECT_NE(bn.find("BatchNormalization"), std::string::npos) << bn;
  EXPECT_THROW(TimeDistributed(LSTM(3)), InvalidArgument);
  EXPECT_THROW(TimeDistributed(MultiHeadAttention(2, 3)), InvalidArgument);
  EXPECT_THROW(TimeDistributed(LayerPtr{}), InvalidArgument);
  auto flat = tk::Input({5});
  const std::string rank = what([&] { TimeDistributed(Dense(2), "td2")(flat); });
  EXPECT_NE(rank.find("(None, 5)"), std::string::npos) << rank;
  // From a Keras config: the wrapped layer's own errors name it.
  io::keras::json td = {
      {"module", "keras.layers"},
      {"class_name", "TimeDistributed"},
      {"config",
       {{"name", "td"},
        {"layer", {{"module", "keras.layers"}, {"class_name", "LSTM"}, {"config", {{"name", "l"}, {"units", 2}}}}}}}};
  EXPECT_THROW(io::keras::layer_from_json(td, "m.keras"), Unsupported);
}

// A model built in C++ trains, saves a Keras file (the wrapped layer's weights under layer/vars) and loads back.
TEST(TimeDistributed, TheCppApiRoundTrips) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(3);
  Sequential m({layers::Input({6}, "tokens", DType::i32), Embedding(12, 4, {.mask_zero = true}),
                TimeDistributed(Dense(5, "tanh")), TimeDistributed(Dropout(0.2f)), GRU(3, {.return_sequences = true}),
                TimeDistributed(Dense(2, "softmax"))});
  m.compile(optimizers::SGD({.learning_rate = 0.1f}), "sparse_categorical_crossentropy", {"accuracy"});
  Tensor ids(Shape{4, 6}, DType::i32), labels(Shape{4, 6}, DType::i32);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int32_t>()[i] = (i % 6) < 2 + (i / 6) ? static_cast<int32_t>(1 + (i * 5) % 11) : 0;
    labels.data<int32_t>()[i] = static_cast<int32_t>(i % 2);
  }
  History h = m.fit(ids, labels, {.batch_size = 4, .epochs = 2, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
  const Tensor a = m.predict(ids);
  const fs::path dir = fs::temp_directory_path() / ("tk_td_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  m.save((dir / "m.keras").string());
  std::unique_ptr<Model> back = models::load_model((dir / "m.keras").string());
  testing::expect_near_keras(back->predict(ids), a, 0.0, "predict after the round trip");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk
