// Keras masks (issue 32): Embedding(mask_zero=True) and Masking make a (batch, steps) mask that the following layers
// pass on and consume as Keras 3 does. Each case checks a consequence that holds exactly: a padded sequence under its
// mask gives what the same layers (shared, so the same weights) give on the unpadded steps alone. The Keras-made
// fixtures (masked_bilstm, masked_forecaster in test_rnn.cpp; masked_encoder in test_transformer.cpp) check the
// numbers against Keras itself; here too what is not built is refused, naming the layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>

#include "keras_fixture_files.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Unsupported& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected tk::Unsupported";
  return {};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(a.data<float>()[i] - b.data<float>()[i])));
  return worst;
}

// (n, steps, features) of deterministic values, steps >= `length` all zeros (the padding Masking masks).
Tensor padded(int64_t n, int64_t steps, int64_t features, int64_t length) {
  Tensor x = Tensor::zeros(Shape{n, steps, features});
  float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < length; ++t)
      for (int64_t f = 0; f < features; ++f)
        p[(i * steps + t) * features + f] = 0.1f * static_cast<float>(((i + 2) * (t + 3) * (f + 5)) % 17) - 0.8f;
  return x;
}

// The first `length` steps of x (n, steps, ...).
Tensor first_steps(const Tensor& x, int64_t length) {
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
  const int64_t steps = dims[1];
  int64_t inner = 1;
  for (size_t i = 2; i < dims.size(); ++i) inner *= dims[i];
  dims[1] = length;
  Tensor out = Tensor::zeros(Shape(dims), x.dtype());
  const size_t elem = dtype_size(x.dtype());
  for (int64_t i = 0; i < dims[0]; ++i)
    std::memcpy(static_cast<char*>(out.raw()) + static_cast<size_t>(i * length * inner) * elem,
                static_cast<const char*>(x.raw()) + static_cast<size_t>(i * steps * inner) * elem,
                static_cast<size_t>(length * inner) * elem);
  return out;
}

// Masked steps keep the recurrent state: an RNN's last output over a padded sequence is the one over the real steps,
// going forwards and backwards (the backward pass starts on padding and keeps its zero state until the real steps).
TEST(KerasMasks, RecurrentLayersSkipMaskedSteps) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(3);
  LayerPtr lstm = LSTM(4, {.return_sequences = true});
  LayerPtr gru = GRU(3, {.go_backwards = true});
  LayerPtr bi = Bidirectional(SimpleRNN(2));
  LayerPtr dense = Dense(2);
  auto head = [&](const KerasTensor& x) { return dense(Concatenate()({gru(lstm(x)), bi(lstm(x))})); };
  KerasTensor in = tk::Input({7, 3});
  Model masked(in, head(Masking()(in)));
  KerasTensor short_in = tk::Input({4, 3});
  Model plain(short_in, head(short_in));
  const Tensor x = padded(5, 7, 3, 4);
  testing::expect_near_keras(masked.predict(x), plain.predict(first_steps(x, 4)), 1e-6, "masked vs the real steps");
  // Without the mask the padding steps change the states.
  Model unmasked(in, head(in));
  EXPECT_GT(max_abs_diff(unmasked.predict(x), plain.predict(first_steps(x, 4))), 1e-3);
}

// GlobalAveragePooling1D averages the unmasked steps; MultiHeadAttention's keys skip the padding, so the real steps'
// outputs are those over the real steps alone.
TEST(KerasMasks, PoolingAndAttentionIgnoreThePadding) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(5);
  LayerPtr embed = Embedding(9, 4, {.mask_zero = true});
  LayerPtr mha = MultiHeadAttention(2, 3);
  LayerPtr pool = GlobalAveragePooling1D();
  KerasTensor ids = tk::Input({6}, "ids", DType::i32);
  KerasTensor e = embed(ids);
  KerasTensor a = mha({e, e});
  Model attention(ids, a), pooled(ids, pool(a));
  KerasTensor short_ids = tk::Input({4}, "short", DType::i32);
  KerasTensor se = embed(short_ids);
  KerasTensor sa = mha({se, se});
  Model short_attention(short_ids, sa), short_pooled(short_ids, pool(sa));
  Tensor x(Shape{3, 6}, DType::i32);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t t = 0; t < 6; ++t)
      x.data<int32_t>()[i * 6 + t] = t < 4 ? static_cast<int32_t>(1 + (i + 3 * t) % 8) : 0;
  const Tensor xs = first_steps(x, 4);
  testing::expect_near_keras(first_steps(attention.predict(x), 4), short_attention.predict(xs), 1e-6, "attention");
  testing::expect_near_keras(pooled.predict(x), short_pooled.predict(xs), 1e-6, "pooled");
}

// An output that still carries the mask (a tagger's per-step softmax): Keras 3 weights its loss and its mean metrics by
// the mask (losses/loss.py apply_mask, MeanMetricWrapper). The loss of a batch is the crossentropy summed over the
// unmasked steps over their count; accuracy over an evaluation is the correct unmasked steps over all unmasked steps
// (Keras' Mean with the mask as sample weights), while the loss is the batches' means weighted by their rows; a batch
// with every step masked has loss 0. Computed here from predict's probabilities (tagger.keras in test_rnn.cpp checks
// the numbers against Keras).
TEST(KerasMasks, AMaskedOutputsLossAndAccuracyCountTheUnmaskedStepsOnly) {
  using namespace layers;
  clear_session();
  KerasTensor ids = tk::Input({5}, "ids", DType::i32);
  KerasTensor e = Embedding(9, 4, {.mask_zero = true, .name = "emb"})(ids);
  Model tagger(ids, Dense(3, "softmax", {.name = "tags"})(LSTM(4, {.return_sequences = true})(e)));
  tagger.compile(optimizers::SGD(), "sparse_categorical_crossentropy", {"accuracy"});
  const int32_t tokens[3][5] = {{3, 1, 4, 1, 5}, {2, 6, 0, 0, 0}, {7, 0, 0, 0, 0}};  // 5, 2 and 1 real steps
  Tensor x(Shape{3, 5}, DType::i32), y(Shape{3, 5}, DType::i32);
  for (int64_t i = 0; i < 15; ++i) {
    x.data<int32_t>()[i] = tokens[i / 5][i % 5];
    y.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 3);
  }
  const Tensor p = tagger.predict(x);  // (3, 5, 3)
  double ce[3] = {0, 0, 0}, correct[3] = {0, 0, 0}, steps[3] = {0, 0, 0};
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t s = 0; s < 5; ++s) {
      if (tokens[r][s] == 0) continue;
      const float* q = p.data<float>() + (r * 5 + s) * 3;
      const int32_t t = y.data<int32_t>()[r * 5 + s];
      ce[r] -= std::log(static_cast<double>(q[t]));
      correct[r] += (std::max_element(q, q + 3) - q) == t ? 1.0 : 0.0;
      steps[r] += 1.0;
    }
  const Logs one = tagger.evaluate(x, y, {.batch_size = 3});
  EXPECT_NEAR(one.get("loss"), (ce[0] + ce[1] + ce[2]) / 8.0, 1e-5);
  EXPECT_NEAR(one.get("accuracy"), (correct[0] + correct[1] + correct[2]) / 8.0, 1e-6);
  const Logs rows = tagger.evaluate(x, y, {.batch_size = 1});  // per batch (row): its own unmasked steps
  EXPECT_NEAR(rows.get("loss"), (ce[0] / 5.0 + ce[1] / 2.0 + ce[2] / 1.0) / 3.0, 1e-5);
  EXPECT_NEAR(rows.get("accuracy"), (correct[0] + correct[1] + correct[2]) / 8.0, 1e-6);
  // Every step masked: loss and accuracy 0 (divide_no_nan), not NaN.
  const Logs none = tagger.evaluate(Tensor::zeros(Shape{2, 5}, DType::i32), Tensor::zeros(Shape{2, 5}, DType::i32));
  EXPECT_EQ(none.get("loss"), 0.0f);
  EXPECT_EQ(none.get("accuracy"), 0.0f);
  // Targets at masked steps change nothing.
  Tensor y2 = y.clone();
  for (int64_t i = 0; i < 15; ++i)
    if (tokens[i / 5][i % 5] == 0) y2.data<int32_t>()[i] = 2 - y2.data<int32_t>()[i] % 3;
  EXPECT_EQ(tagger.evaluate(x, y2, {.batch_size = 3}).get("loss"), one.get("loss"));
}

// What Keras does with a mask and trainkit does not build is refused, naming the layer.
TEST(KerasMasks, UnbuiltMaskUsesAreRefused) {
  using namespace layers;
  clear_session();
  KerasTensor ids = tk::Input({5}, "ids", DType::i32);
  KerasTensor e = Embedding(9, 4, {.mask_zero = true, .name = "emb"})(ids);
  Tensor x(Shape{2, 5}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = static_cast<int32_t>(i % 4);
  // Softmax applies the mask inside (not built); Concatenate's mask merge is not built.
  Model soft(ids, Softmax(-1, "soft")(e));
  const std::string s = what_of([&] { soft.predict(x); });
  EXPECT_NE(s.find("'soft'"), std::string::npos) << s;
  Model cat(ids, Concatenate(-1, "cat")({e, e}));
  const std::string c = what_of([&] { cat.predict(x); });
  EXPECT_NE(c.find("'cat'"), std::string::npos) << c;
  // A layer without Keras' supports_masking drops the mask, as Keras does: Flatten's output trains.
  Model flat(ids, Dense(2)(Flatten()(e)));
  flat.compile(optimizers::SGD(), "mse");
  EXPECT_NO_THROW(flat.evaluate(x, Tensor::zeros(Shape{2, 2})));
}

}  // namespace
}  // namespace tk
