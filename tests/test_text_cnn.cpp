// Sequence models from Keras 3.15.1 files (issue 32): an int32 token Input, Embedding and the 1D layers. Each fixture
// model loads, predicts and evaluates as Keras did, takes one SGD step (the weights after it are the gradient's check)
// and one epoch of fit as Keras did, and is saved back; the file trainkit wrote after its epoch loaded in Keras with
// the same predictions (keras_loaded_trainkit_text_cnn.json). Fixtures: tests/fixtures/keras/text_cnn/
// (gen_text_cnn.py beside them). Bad token ids and refused options are clear errors.
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
#include "graph/program.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_fixture_files.h"
#include "keras_weights_compare.h"
#include "nn/layers/context.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/text_cnn/";

using testing::rel;
constexpr auto expect_near = testing::expect_near_keras;

struct Case {
  const char* name;
  DType input;   // the InputLayer's dtype in the file
  bool dropout;  // a training step draws dropout masks (Keras' differ): only inference is compared
};
const Case kCases[] = {{"text_cnn", DType::i32, false}, {"seq1d", DType::i64, false}, {"dropout1d", DType::f32, true}};

class KerasTextCnn : public ::testing::TestWithParam<Case> {};

TEST_P(KerasTextCnn, LoadsMatchesKerasTrainsAndSavesBack) {
  const Case c = GetParam();
  auto r = testing::load_fixture(kDir + c.name + "_expect.txt");
  const Tensor& x = r["x"];
  const Tensor& y = r["y"];
  std::unique_ptr<Model> model = models::load_model(kDir + c.name + ".keras");
  ASSERT_EQ(model->input_dtype(0), c.input) << "the InputLayer keeps its dtype";

  // predict within 1e-4 (relative where above 1), the evaluate loss within 1e-4 relative.
  const Tensor pred = model->predict(x);
  expect_near(pred, r["predict"], 1e-4, "predict");
  const Logs ev = model->evaluate(x, y, {.batch_size = x.dim(0)});
  EXPECT_LE(rel(ev.get("loss"), r["evaluate_loss"].data<float>()[0]), 1e-4) << ev.get("loss");
  if (c.dropout) {
    EXPECT_NO_THROW(model->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false}));
  } else {
    // One SGD step: the weights after it are before - 0.1 * gradient, so they check every gradient.
    const Logs& step = model->train_on_batch({x}, {y});
    EXPECT_LE(rel(step.get("loss"), r["step_loss"].data<float>()[0]), 1e-4);
    int checked = 0;
    for (const LayerPtr& layer : model->layers())
      for (const Weight& w : layer->weights()) {
        ASSERT_TRUE(r.count("step/" + w.name)) << w.name;
        expect_near(w.value, r["step/" + w.name], 1e-5, "step/" + w.name);
        ++checked;
      }
    EXPECT_GT(checked, 3);
    // One epoch of fit (3 batches of 8, in order) from the saved weights.
    std::unique_ptr<Model> fresh = models::load_model(kDir + c.name + ".keras");
    History h = fresh->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    EXPECT_LE(rel(h.history.at("loss").at(0), r["epoch_loss"].data<float>()[0]), 1e-4);
    for (const LayerPtr& layer : fresh->layers())
      for (const Weight& w : layer->weights()) expect_near(w.value, r["epoch/" + w.name], 1e-4, "epoch/" + w.name);
  }

  // Saved back: the same input dtype and predictions.
  std::unique_ptr<Model> back = testing::saved_and_loaded(*model);
  EXPECT_EQ(back->input_dtype(0), c.input);
  expect_near(back->predict(x), model->predict(x), 0.0, "predict after the round trip");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasTextCnn, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The files trainkit writes after its own epoch, which Keras loaded (gen_text_cnn.py --check-trainkit wrote the
// verdict keras_loaded_trainkit_text_cnn.json), are what trainkit writes today: same config.json, same weights. With
// TK_KERAS_FIXTURE_OUT set, (re)writes trainkit_<model>.keras and its predictions there instead.
TEST(KerasTextCnnFiles, TrainkitWrittenFilesKerasLoadedAreStillWhatTrainkitWrites) {
  const char* out = std::getenv("TK_KERAS_FIXTURE_OUT");
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    utils::set_random_seed(32);  // the seed SpatialDropout1D draws for its file's seed=None, written back
    auto r = testing::load_fixture(kDir + c.name + "_expect.txt");
    std::unique_ptr<Model> model = models::load_model(kDir + c.name + ".keras");
    if (!c.dropout) model->fit(r["x"], r["y"], {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    const std::string name = std::string("trainkit_") + c.name;
    if (out) {
      testing::write_trainkit_fixture(*model, r["x"], out, name, "tests/test_text_cnn.cpp", "gen_text_cnn.py");
      continue;
    }
    testing::keras_verdict(kDir, "keras_loaded_trainkit_text_cnn.json", "gen_text_cnn.py", c.name);
    testing::expect_saves_as_committed(*model, kDir + name + ".keras");
  }
  if (out) GTEST_SKIP() << "wrote the trainkit_*.keras files into " << out;
}

// Token ids as int64, int32 or float arrays give the same predictions (staging converts each batch to the Input's
// dtype), through the C++ API with an int32 Input.
TEST(Embedding, IntegerInputsOfAnyWidthTrainAndPredictTheSame) {
  using namespace layers;
  clear_session();
  utils::set_random_seed(7);
  Sequential m({layers::Input({6}, "tokens", DType::i32), Embedding(10, 4), GlobalAveragePooling1D(), Dense(2)});
  m.compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  Tensor ids32(Shape{4, 6}, DType::i32), ids64(Shape{4, 6}, DType::i64), idsf(Shape{4, 6}, DType::f32);
  for (int64_t i = 0; i < 24; ++i) {
    ids32.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
    ids64.data<int64_t>()[i] = (i * 7) % 10;
    idsf.data<float>()[i] = static_cast<float>((i * 7) % 10);
  }
  const Tensor a = m.predict(ids32), b = m.predict(ids64), c = m.predict(idsf);
  expect_near(b, a, 0.0, "int64 ids");
  expect_near(c, a, 0.0, "float ids");
  Tensor labels(Shape{4}, DType::i32);
  for (int i = 0; i < 4; ++i) labels.data<int32_t>()[i] = i % 2;
  History h = m.fit(ids64, labels, {.batch_size = 2, .epochs = 2, .verbose = 0});
  EXPECT_EQ(h.history.at("loss").size(), 2u);
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
}

// Under mixed_float16 the table stays float32 and the gathered rows are cast to float16: it trains, and predicts as
// the float32 model within float16's rounding.
TEST(Embedding, TrainsUnderAMixedPolicy) {
  using namespace layers;
  auto build = [] {
    clear_session();
    utils::set_random_seed(3);
    return std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({8}, "tokens", DType::i32),
                                                              Embedding(16, 8), Conv1D(4, 3, "relu"),
                                                              GlobalMaxPooling1D(), Dense(2)});
  };
  Tensor ids(Shape{4, 8}, DType::i32);
  for (int64_t i = 0; i < 32; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>((i * 5) % 16);
  const Tensor full = build()->predict(ids);
  std::unique_ptr<Sequential> mp = build();
  Sequential& m = *mp;
  m.set_dtype_policy("mixed_float16");
  m.compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  const Tensor half = m.predict(ids);
  ASSERT_EQ(half.shape(), full.shape());
  for (int64_t i = 0; i < full.numel(); ++i) EXPECT_NEAR(half.data<float>()[i], full.data<float>()[i], 2e-3) << i;
  Tensor labels(Shape{4}, DType::i32);
  for (int i = 0; i < 4; ++i) labels.data<int32_t>()[i] = i % 2;
  History h = m.fit(ids, labels, {.batch_size = 4, .epochs = 2, .verbose = 0});
  EXPECT_TRUE(std::isfinite(h.history.at("loss").back()));
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// An id >= input_dim or < 0: an InvalidArgument naming the layer, the id, its row in the batch and input_dim.
TEST(Embedding, AnIdOutsideTheVocabularyNamesTheLayerTheRowAndTheSize) {
  using namespace layers;
  clear_session();
  Sequential m({layers::Input({5}, "tokens", DType::i32), Embedding(20, 3, {.name = "words"}), Flatten(), Dense(1)});
  for (int32_t bad : {20, 1000, -1}) {
    Tensor ids(Shape{3, 5}, DType::i32);
    for (int64_t i = 0; i < 15; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(i);  // ids 0..14: valid
    ids.data<int32_t>()[2 * 5 + 3] = bad;                                               // row 2, step 3
    const std::string m1 = what_of([&] { m.predict(ids); });
    EXPECT_NE(m1.find("'words'"), std::string::npos) << m1;
    EXPECT_NE(m1.find("index " + std::to_string(bad)), std::string::npos) << m1;
    EXPECT_NE(m1.find("indices[2, 3], row 2 of the batch"), std::string::npos) << m1;
    EXPECT_NE(m1.find("table of 20 rows"), std::string::npos) << m1;
    EXPECT_NE(m1.find("input_dim"), std::string::npos) << m1;
    EXPECT_THROW(m.predict(ids), InvalidArgument);
  }
}

// A sequence longer (or shorter) than the model's static length is an InvalidArgument naming both shapes.
TEST(Embedding, ASequenceOfAnotherLengthNamesBothLengths) {
  std::unique_ptr<Model> model = models::load_model(kDir + "text_cnn.keras");
  Tensor ids = Tensor::zeros(Shape{2, 50}, DType::i32);
  const std::string e = what_of([&] { model->predict(ids); });
  EXPECT_NE(e.find("(None, 40)"), std::string::npos) << e;
  EXPECT_NE(e.find("(2, 50)"), std::string::npos) << e;
  EXPECT_THROW(model->predict(ids), InvalidArgument);
}

// The options trainkit refuses are clear errors: the constructor's InvalidArgument, and Unsupported from a file.
TEST(SequenceLayers, BadOptionsAndShapesAreClearErrors) {
  using namespace layers;
  EXPECT_THROW(Embedding(0, 4), InvalidArgument);
  EXPECT_NO_THROW(Embedding(10, 4, {.mask_zero = true, .name = "emb"}));  // masks: tests/test_masks.cpp
  EXPECT_THROW(Conv1D(4, 3, "linear", {.padding = "full"}), InvalidArgument);
  EXPECT_THROW(Conv1D(4, 3, "linear", {.strides = 2, .dilation_rate = 2}), InvalidArgument);
  EXPECT_THROW(Conv1D(5, 3, "linear", {.groups = 2}), InvalidArgument);                        // filters % groups
  EXPECT_THROW((*Conv1D(4, 3, "linear", {.groups = 2}))(tk::Input({8, 3})), InvalidArgument);  // channels % groups
  EXPECT_THROW((*Conv1D(4, 9))(tk::Input({8, 3})), InvalidArgument);     // kernel longer than the steps
  EXPECT_THROW((*Conv1D(4, 3))(tk::Input({8, 3, 2})), InvalidArgument);  // not (batch, steps, channels)
  EXPECT_NO_THROW((*Conv1D(4, 9, "linear", {.padding = "causal"}))(tk::Input({8, 3})));
  EXPECT_THROW((*MaxPooling1D(9))(tk::Input({8, 3})), InvalidArgument);
  EXPECT_THROW((*GlobalMaxPooling1D())(tk::Input({8})), InvalidArgument);
  EXPECT_THROW((*Cropping1D(4, 4))(tk::Input({8, 3})), InvalidArgument);
  EXPECT_THROW(UpSampling1D(0), InvalidArgument);
  EXPECT_THROW(SpatialDropout1D(1.0f), InvalidArgument);
  EXPECT_THROW(layers::Input({4}, "x", DType::f16), InvalidArgument);
}

// A .keras config with an option trainkit lacks, or an InputLayer of another dtype, is one Unsupported error naming the
// layer (mask_zero=True loads: tests/test_masks.cpp).
TEST(SequenceLayers, FileOptionsTrainkitLacksAreUnsupportedNamingTheLayer) {
  using io::keras::json;
  json emb = {{"module", "keras.layers"},
              {"class_name", "Embedding"},
              {"config", {{"name", "emb"}, {"input_dim", 10}, {"output_dim", 4}, {"mask_zero", true}}},
              {"registered_name", nullptr}};
  EXPECT_NO_THROW(io::keras::layer_from_json(emb, "m.keras"));
  emb["config"]["mask_zero"] = false;
  emb["config"]["embeddings_constraint"] = {{"class_name", "UnitNorm"}};  // Keras' own: read (test_constraints.cpp)
  EXPECT_EQ(io::keras::layer_from_json(emb, "m.keras")->constraints.count("embeddings"), 1u);
  emb["config"]["embeddings_constraint"] = {{"class_name", "RadialConstraint"}};  // a custom class: refused
  EXPECT_THROW(io::keras::layer_from_json(emb, "m.keras"), Unsupported);
  json in = {{"module", "keras.layers"},
             {"class_name", "InputLayer"},
             {"config", {{"name", "tokens"}, {"batch_shape", {nullptr, 8}}, {"dtype", "float16"}}},
             {"registered_name", nullptr}};
  std::string e = what_of([&] { io::keras::layer_from_json(in, "m.keras"); });
  EXPECT_NE(e.find("'tokens'"), std::string::npos) << e;
  EXPECT_NE(e.find("int32"), std::string::npos) << e;
  in["config"]["dtype"] = "int64";
  EXPECT_NO_THROW(io::keras::layer_from_json(in, "m.keras"));
}

// SpatialDropout1D drops whole channels: per (sample, channel) every step is 0 or x / (1 - rate); identity outside
// training.
TEST(SequenceLayers, SpatialDropout1DDropsWholeChannels) {
  LayerPtr layer = layers::SpatialDropout1D(0.5f, 99);
  (*layer)(tk::Input({7, 16}));
  Tensor x(Shape{3, 7, 16}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.0f + static_cast<float>(i % 5);
  for (bool training : {true, false}) {
    graph::Graph g;
    nn::CallContext ctx{g, training, DType::f32, {}, {}, {}};
    Tensor xv = x.clone();
    const int y = layer->call(ctx, {g.variable("x", xv)});
    graph::Program p(std::move(g), {y}, {}, Device::cpu());
    p.run(graph::ExecContext{});
    const Tensor out = p.output(y);
    int dropped = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t c = 0; c < 16; ++c) {
        const bool zero = out.data<float>()[(n * 7) * 16 + c] == 0.0f;
        dropped += zero;
        for (int64_t t = 0; t < 7; ++t) {
          const int64_t i = (n * 7 + t) * 16 + c;
          const float want = zero ? 0.0f : x.data<float>()[i] * (training ? 2.0f : 1.0f);
          ASSERT_EQ(out.data<float>()[i], want) << "sample " << n << " channel " << c << " step " << t;
        }
      }
    if (training) {
      EXPECT_GT(dropped, 8);
      EXPECT_LT(dropped, 40);
    } else {
      EXPECT_EQ(dropped, 0);
    }
  }
}

}  // namespace
}  // namespace tk
