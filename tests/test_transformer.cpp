// MultiHeadAttention and transformer models from Keras 3.15.1 files (issue 32, items 3 and 4). Each fixture model
// (a transformer encoder classifier; a causal transformer language model with use_causal_mask=True and sparse
// crossentropy and accuracy over (batch, steps)) loads, predicts and evaluates as Keras did, takes one SGD step (the
// weights after it check every gradient against Keras') and one epoch of fit as Keras did, and is saved back; the file
// trainkit wrote after its epoch loaded in Keras with the same predictions (keras_loaded_trainkit_transformer.json).
// The layer's gradients are also checked by finite differences. Fixtures: tests/fixtures/keras/transformer/
// (gen_transformer.py beside them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>

#include "fixture.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
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

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/transformer/";

using testing::rel;
constexpr auto expect_near = testing::expect_near_keras;

const char* const kModels[] = {"encoder", "causal_lm", "masked_encoder"};

class KerasTransformer : public ::testing::TestWithParam<const char*> {};

TEST_P(KerasTransformer, LoadsMatchesKerasTrainsAndSavesBack) {
  const std::string name = GetParam();
  auto r = testing::load_fixture(kDir + name + "_expect.txt");
  const Tensor& x = r["x"];
  const Tensor& y = r["y"];
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  ASSERT_EQ(model->input_dtype(0), DType::i32);

  const Tensor pred = model->predict(x);
  expect_near(pred, r["predict"], 1e-4, "predict");
  const Logs ev = model->evaluate(x, y, {.batch_size = x.dim(0)});
  EXPECT_LE(rel(ev.get("loss"), r["evaluate_loss"].data<float>()[0]), 1e-4) << ev.get("loss");
  EXPECT_LE(rel(ev.get("accuracy"), r["evaluate_accuracy"].data<float>()[0]), 1e-4) << ev.get("accuracy");

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
  EXPECT_GT(checked, 10);
  // The step's change of each weight (-0.1 x its gradient) against Keras' within 2% of its largest element: the
  // attention's query and key kernels move by ~1e-6 in one step here, below the weights' tolerance above (the key
  // bias's gradient is 0: softmax ignores what it adds to every score of a row; both sides hold rounding noise).
  for (const LayerPtr& layer : model->layers())
    for (const Weight& w : layer->weights()) {
      const float* before = r["before/" + w.name].data<float>();
      const float* keras = r["step/" + w.name].data<float>();
      double worst = 0, largest = 0;
      for (int64_t i = 0; i < w.value.numel(); ++i) {
        const double want = keras[i] - before[i];
        largest = std::max(largest, std::abs(want));
        worst = std::max(worst, std::abs((w.value.data<float>()[i] - before[i]) - want));
      }
      EXPECT_LE(worst, 0.02 * largest + 1e-9) << "the step's change of " << w.name;
    }
  // One epoch of fit (3 batches of 8, in order) from the saved weights.
  std::unique_ptr<Model> fresh = models::load_model(kDir + name + ".keras");
  History h = fresh->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_LE(rel(h.history.at("loss").at(0), r["epoch_loss"].data<float>()[0]), 1e-4);
  for (const LayerPtr& layer : fresh->layers())
    for (const Weight& w : layer->weights()) expect_near(w.value, r["epoch/" + w.name], 1e-4, "epoch/" + w.name);

  // Saved back: the same predictions, and the same config (the call's use_causal_mask and key kept).
  std::unique_ptr<Model> back = testing::saved_and_loaded(*fresh);
  expect_near(back->predict(x), fresh->predict(x), 0.0, "predict after the round trip");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasTransformer, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// The files trainkit writes after its own epoch, which Keras loaded (gen_transformer.py --check-trainkit wrote the
// verdict keras_loaded_trainkit_transformer.json), are what trainkit writes today: same config.json, same weights and
// optimizer variables. With TK_KERAS_FIXTURE_OUT set, (re)writes trainkit_<model>.keras and its predictions there.
TEST(KerasTransformerFiles, TrainkitWrittenFilesKerasLoadedAreStillWhatTrainkitWrites) {
  const char* out = std::getenv("TK_KERAS_FIXTURE_OUT");
  for (const char* c : kModels) {
    SCOPED_TRACE(c);
    utils::set_random_seed(32);  // the seed MultiHeadAttention draws for its file's seed=None, written back
    auto r = testing::load_fixture(kDir + c + "_expect.txt");
    std::unique_ptr<Model> model = models::load_model(kDir + c + ".keras");
    model->fit(r["x"], r["y"], {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    const std::string name = std::string("trainkit_") + c;
    if (out) {
      testing::write_trainkit_fixture(*model, r["x"], out, name, "tests/test_transformer.cpp", "gen_transformer.py");
      continue;
    }
    const auto verdict =
        testing::keras_verdict(kDir, "keras_loaded_trainkit_transformer.json", "gen_transformer.py", c);
    EXPECT_EQ(verdict["optimizer_iterations"], 3);
    testing::expect_saves_as_committed(*model, kDir + name + ".keras");
  }
  if (out) GTEST_SKIP() << "wrote the trainkit_*.keras files into " << out;
}

// The Keras file's groups for MultiHeadAttention: each projection in its sub-layer's vars (Keras' order and shapes),
// the empty _softmax and _dropout_layer groups, and the optimizer's slots in Keras' order of the weights.
TEST(MultiHeadAttention, KerasWeightGroupsAndOptimizerOrder) {
  std::unique_ptr<Model> model = models::load_model(kDir + "causal_lm.keras");
  const auto archive = io::keras::read_archive(kDir + "causal_lm.keras");
  io::H5Tree keras = io::read_h5_tree_image("keras", archive.weights.data(), archive.weights.size());
  const io::H5Tree mine = io::keras::weights_to_tree(*model);
  for (const char* g : {"layers/multi_head_attention/vars", "layers/multi_head_attention/query_dense/vars",
                        "layers/multi_head_attention/key_dense/vars", "layers/multi_head_attention/value_dense/vars",
                        "layers/multi_head_attention/output_dense/vars", "layers/multi_head_attention/_softmax/vars",
                        "layers/multi_head_attention/_dropout_layer/vars"}) {
    EXPECT_TRUE(keras.groups.count(g)) << g;
    EXPECT_TRUE(mine.groups.count(g)) << g;
  }
  EXPECT_EQ(mine.dataset("layers/multi_head_attention/query_dense/vars/0")->shape(), (Shape{16, 4, 4}));
  EXPECT_EQ(mine.dataset("layers/multi_head_attention/output_dense/vars/0")->shape(), (Shape{4, 4, 16}));
  EXPECT_EQ(mine.dataset("layers/multi_head_attention/output_dense/vars/1")->shape(), (Shape{16}));
  // Keras' order of the layer's weights (its optimizer slots follow it): query, key, value, attention_output.
  const Layer& mha = *model->get_layer("multi_head_attention");
  std::vector<std::string> names;
  for (const Weight& w : mha.weights()) names.push_back(w.name);
  EXPECT_EQ(names, (std::vector<std::string>{"multi_head_attention/query/kernel", "multi_head_attention/query/bias",
                                             "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
                                             "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
                                             "multi_head_attention/attention_output/kernel",
                                             "multi_head_attention/attention_output/bias"}));
}

// Finite differences of sum(y * r) for a MultiHeadAttention with every option the fixtures do not cover (value_dim !=
// key_dim, a separate key, a 2-d output_shape, causal with T != S) against autodiff's gradients.
TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    clear_session();
    utils::set_random_seed(5);
    layers::MultiHeadAttentionOptions o;
    o.value_dim = 3;
    o.output_shape = {2, 3};
    o.bias_initializer = "random_normal";
    LayerPtr layer = layers::MultiHeadAttention(2, 2, o);
    const int64_t n = 2, t = 4, s = 3;
    LayerConfig opts;
    if (causal) opts.set("use_causal_mask", true);
    (*layer)({tk::Input({t, 5}), tk::Input({s, 4}), tk::Input({s, 6})}, opts);
    auto filled = [](Shape shape, float k) {
      Tensor v(shape, DType::f32);
      for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = std::sin(k * static_cast<float>(i + 1));
      return v;
    };
    Tensor q = filled(Shape{n, t, 5}, 0.7f), v = filled(Shape{n, s, 4}, 1.3f), k = filled(Shape{n, s, 6}, 0.4f);
    Tensor r = filled(Shape{n, t, 2, 3}, 2.1f);
    graph::Graph g;
    nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
    ctx.call_options = &opts;
    const int qi = g.variable("q", q), vi = g.variable("v", v), ki = g.variable("k", k);
    const int y = layer->call(ctx, {qi, vi, ki});
    graph::OpBuilder b{g, nullptr, "loss"};
    const int loss = graph::ops::reduce(b, graph::ReduceFn::sum,
                                        graph::ops::binary(b, graph::BinaryFn::multiply, y, g.variable("r", r)),
                                        {0, 1, 2, 3}, false);
    std::vector<Tensor*> wrt_t = {&q, &v, &k};
    std::vector<int> wrt = {qi, vi, ki};
    for (Weight& w : layer->weights()) {
      wrt_t.push_back(&w.value);
      wrt.push_back(ctx.variable(w));
    }
    const std::vector<int> grads = graph::gradients(g, {loss}, wrt);
    std::vector<int> outs = {loss};
    outs.insert(outs.end(), grads.begin(), grads.end());
    graph::Program p(std::move(g), outs, {}, Device::cpu());
    auto run_loss = [&] {
      p.run(graph::ExecContext{});
      return static_cast<double>(p.output_scalar(loss));
    };
    run_loss();
    std::vector<Tensor> analytic;
    for (int gr : grads) analytic.push_back(p.output(gr).clone());
    int compared = 0;
    for (size_t j = 0; j < wrt_t.size(); ++j) {
      float* data = wrt_t[j]->data<float>();
      for (int64_t i = 0; i < wrt_t[j]->numel(); i += 3) {
        const float keep = data[i];
        const float h = 1e-2f;
        data[i] = keep + h;
        const double up = run_loss();
        data[i] = keep - h;
        const double down = run_loss();
        data[i] = keep;
        const double fd = (up - down) / (2.0 * h);
        EXPECT_NEAR(analytic[j].data<float>()[i], fd, 2e-3 * std::max(1.0, std::abs(fd)))
            << "input/weight " << j << " element " << i;
        ++compared;
      }
    }
    EXPECT_GT(compared, 60);
  }
}

// dropout acts on the attention probabilities in training programs only: inference is the dropout-free layer's output,
// a training program's differs from it (and stays finite), and the same seed draws the same masks.
TEST(MultiHeadAttention, DropoutOnTheProbabilitiesInTrainingOnly) {
  auto run = [](float rate, bool training) {
    clear_session();
    utils::set_random_seed(9);
    LayerPtr layer = layers::MultiHeadAttention(2, 4, {.dropout = rate, .seed = 17});
    (*layer)({tk::Input({5, 6}), tk::Input({5, 6})});
    Tensor x(Shape{3, 5, 6}, DType::f32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.3f * static_cast<float>(i));
    graph::Graph g;
    nn::CallContext ctx{g, training, DType::f32, {}, {}, {}};
    const int xi = g.variable("x", x);
    const int y = layer->call(ctx, {xi, xi});
    graph::Program p(std::move(g), {y}, {}, Device::cpu());
    p.run(graph::ExecContext{});
    return p.output(y).clone();
  };
  const Tensor plain = run(0.0f, false), inference = run(0.5f, false), train = run(0.5f, true);
  expect_near(inference, plain, 0.0, "dropout outside training");
  double differs = 0;
  for (int64_t i = 0; i < plain.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(train.data<float>()[i]));
    differs = std::max(differs, double(std::abs(train.data<float>()[i] - plain.data<float>()[i])));
  }
  EXPECT_GT(differs, 1e-3);
  expect_near(run(0.5f, true), train, 0.0, "the same seed, the same masks");
}

// Under mixed_float16 (the projections, scores and softmax in float16; the causal mask's -3e4) the causal LM predicts
// as in float32 within float16's rounding and trains to finite losses.
TEST(MultiHeadAttention, CausalLmUnderMixedFloat16) {
  auto r = testing::load_fixture(kDir + "causal_lm_expect.txt");
  std::unique_ptr<Model> model = models::load_model(kDir + "causal_lm.keras");
  model->set_dtype_policy("mixed_float16");
  model->compile(optimizers::SGD(), Loss("sparse_categorical_crossentropy", true));
  const Tensor pred = model->predict(r["x"]);
  ASSERT_EQ(pred.shape(), r["predict"].shape());
  for (int64_t i = 0; i < pred.numel(); ++i)
    ASSERT_NEAR(pred.data<float>()[i], r["predict"].data<float>()[i], 2e-2) << i;
  History h = model->fit(r["x"], r["y"], {.batch_size = 8, .epochs = 2, .verbose = 0, .shuffle = false});
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

// Options and call arguments trainkit does not build are clear errors naming the layer: the constructor's and the
// call's InvalidArgument, and Unsupported from a file.
TEST(MultiHeadAttention, UnsupportedOptionsAreClearErrors) {
  EXPECT_THROW(layers::MultiHeadAttention(0, 4), InvalidArgument);
  EXPECT_THROW(layers::MultiHeadAttention(2, 4, {.dropout = 1.0f}), InvalidArgument);
  LayerPtr mha = layers::MultiHeadAttention(2, 4, {.name = "att"});
  const KerasTensor x = tk::Input({6, 8});
  std::string e = what_of([&] { (*mha)({x, x}, LayerConfig{}.set("return_attention_scores", true)); });
  EXPECT_NE(e.find("'att'"), std::string::npos) << e;
  EXPECT_NE(e.find("return_attention_scores"), std::string::npos) << e;
  EXPECT_THROW((*mha)({tk::Input({6, 8, 2}), tk::Input({6, 8, 2})}), InvalidArgument);  // not (batch, steps, d)
  EXPECT_THROW((*mha)({x, tk::Input({6, 8}), tk::Input({5, 8})}), InvalidArgument);     // key and value lengths
  EXPECT_THROW((*layers::Dense(2))({x}, LayerConfig{}.set("use_causal_mask", true)), InvalidArgument);

  // From a file: attention_mask (a tensor kwarg) and the options trainkit lacks are Unsupported naming the layer.
  const auto archive = io::keras::read_archive(kDir + "causal_lm.keras", false);
  io::keras::json config = io::keras::json::parse(archive.config);
  for (auto& l : config["config"]["layers"]) {
    if (l["class_name"] != "MultiHeadAttention") continue;
    io::keras::json mask_call = config;
    for (auto& m : mask_call["config"]["layers"])
      if (m["class_name"] == "MultiHeadAttention")
        m["inbound_nodes"][0]["kwargs"]["attention_mask"] = m["inbound_nodes"][0]["args"][0];
    e = what_of([&] { io::keras::model_from_json(mask_call, "m.keras"); });
    EXPECT_NE(e.find("'multi_head_attention'"), std::string::npos) << e;
    EXPECT_NE(e.find("attention_mask"), std::string::npos) << e;
    EXPECT_THROW(io::keras::model_from_json(mask_call, "m.keras"), Unsupported);
    io::keras::json obj = l;
    obj["config"]["use_gate"] = true;
    EXPECT_THROW(io::keras::layer_from_json(obj, "m.keras"), Unsupported);
    obj = l;
    obj["config"]["attention_axes"] = {2};
    EXPECT_THROW(io::keras::layer_from_json(obj, "m.keras"), Unsupported);
  }
}

}  // namespace
}  // namespace tk
