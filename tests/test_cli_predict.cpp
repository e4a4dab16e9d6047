// `trainkit predict MODEL --data FILE [--x NAME] --out preds.npy|.npz`: the model file's outputs for every sample, as
// Model::predict gives them in this process (bit for bit, same batches), from NPY and NPZ features; the progress
// line counts the batches; bad input is one clear error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_run.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/idx.h"
#include "trainkit/data/npy.h"
#include "trainkit/io/keras.h"
#include "trainkit/trainkit.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)

std::string cli_fixture(const std::string& name) {
  return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/cli/" + name;
}

void expect_same(const tk::Tensor& a, const tk::Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), tk::DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << "element " << i;
}

// A model trained for one epoch on the IDX images (uint8 28x28, a Rescaling first), saved as .keras.
const std::string& idx_model() {
  static const std::string path = [] {
    const std::string p = path_of("predict_idx.keras");
    const Result r = run_cli("fit" + plain_data().args() + " --model dense:16:relu,dense:10 --epochs 1 -v 0 " +
                             "--no-summary --save " + quote(p));
    EXPECT_EQ(r.code, 0) << describe(r);
    return p;
  }();
  return path;
}

}  // namespace

TEST(CliPredict, WritesTheModelsOutputsForEverySampleAsPredictDoes) {
  const tk::Tensor x = tk::data::load_idx(plain_data().train_images);  // uint8 (256, 28, 28)
  const std::string features = path_of("predict_x.npy"), out = path_of("predict_out.npy");
  tk::data::save_npy(features, x);
  const Result r =
      run_cli("predict " + quote(idx_model()) + " --data " + quote(features) + " --out " + quote(out) + " -v 2");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "8/8 [==============================] - ");  // 256 rows in batches of 32 (Keras' default)
  EXPECT_CONTAINS(r.out, "wrote " + out + ": (256, 10) float32");
  const tk::Tensor got = tk::data::load_npy(out);
  const std::unique_ptr<tk::Model> m = tk::models::load_model(idx_model(), /*compile=*/false);
  // The reference: Model::predict over the same batches of the same Dataset, in this process.
  auto reference = [&](int64_t batch) {
    return m->predict(tk::data::Dataset::from_tensor_slices({x}).batch(batch))[0];
  };
  expect_same(got, reference(32));
  // Another batch size: 3 batches, the same predictions (row by row).
  const Result b = run_cli("predict " + quote(idx_model()) + " --data " + quote(features) + " --out " + quote(out) +
                           " -v 2 --batch-size 100 --device cpu");
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_CONTAINS(b.out, "3/3 [");
  expect_same(tk::data::load_npy(out), reference(100));
  // -v 0: no progress and no summary line (the device's "Created device" line is TensorFlow's INFO log line, which
  // verbose does not govern: TK_CPP_MIN_LOG_LEVEL does, below).
  const Result quiet =
      run_cli("predict " + quote(idx_model()) + " --data " + quote(features) + " --out " + quote(out) + " -v 0");
  ASSERT_EQ(quiet.code, 0) << describe(quiet);
  EXPECT_FALSE(contains(quiet.out, "[=")) << quiet.out;
  EXPECT_FALSE(contains(quiet.out, "wrote")) << quiet.out;
}

// A model file that starts with a Rescaling (as `trainkit fit` saves one for uint8 pixels, and Keras' image models
// are built) is fed the pixels as they are when it trains further: `fit --model m.keras --epochs 0` reports the test
// loss Model::evaluate gives on the raw uint8 images. Scaling them first as well would feed it pixels / 255^2.
TEST(CliPredict, FitFeedsAModelThatRescalesItsInputTheRawPixels) {
  const Result r =
      run_cli("fit" + plain_data().args() + " --model " + quote(idx_model()) + " --epochs 0 -v 0 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::unique_ptr<tk::Model> m = tk::models::load_model(idx_model(), /*compile=*/true);
  const auto [x, y] =
      tk::data::load_idx_pair(plain_data().test_images, plain_data().test_labels);  // uint8 (64, 28, 28)
  const double loss = m->evaluate(x, y, {.batch_size = 64}).get("loss");
  char want[64];
  std::snprintf(want, sizeof want, "test_loss: %.4f", loss);
  EXPECT_CONTAINS(r.out, want);
}

TEST(CliPredict, ReadsTheFeaturesOfAnNpzByKey) {
  const std::string model = path_of("predict_npz.keras"), out = path_of("predict_npz.npy");
  const Result fit = run_cli("fit --data " + quote(cli_fixture("train.npz")) +
                             " --model dense:8:relu,dense:2 --epochs 1 -v 0 --no-summary --save " + quote(model));
  ASSERT_EQ(fit.code, 0) << describe(fit);
  const Result r = run_cli("predict " + quote(model) + " --data " + quote(cli_fixture("test.npz")) + " --x x --out " +
                           quote(out) + " -v 0");
  ASSERT_EQ(r.code, 0) << describe(r);
  const tk::Tensor x = tk::data::load_npz(cli_fixture("test.npz"), "x");
  const std::unique_ptr<tk::Model> m = tk::models::load_model(model, /*compile=*/false);
  expect_same(tk::data::load_npy(out), m->predict(tk::data::Dataset::from_tensor_slices({x}).batch(32))[0]);
  expect_user_error(run_cli("predict " + quote(model) + " --data " + quote(cli_fixture("test.npz")) +
                            " --x nosuchkey --out " + quote(out)),
                    {"nosuchkey"});
}

TEST(CliPredict, BadInputIsOneClearError) {
  const std::string features = path_of("predict_bad_x.npy");
  tk::data::save_npy(features, tk::data::load_idx(plain_data().train_images));
  expect_user_error(run_cli("predict " + quote(idx_model()) + " --data " + quote(features) + " --out p.csv"),
                    {"--out p.csv", ".npy"});
  expect_user_error(run_cli("predict dense:10 --data " + quote(features) + " --out p.npy"), {"dense:10", ".keras"});
  expect_user_error(run_cli("predict " + quote(idx_model()) + " --data " + quote(features) + " --out " +
                            quote(path_of("p.npy")) + " --batch-size 0"),
                    {"--batch-size"});
  // The features do not fit the model's input.
  const std::string wrong = path_of("predict_wrong.npy");
  tk::data::save_npy(wrong, tk::Tensor::zeros(tk::Shape{4, 5}));
  const Result r =
      run_cli("predict " + quote(idx_model()) + " --data " + quote(wrong) + " --out " + quote(path_of("p.npy")));
  EXPECT_EQ(r.code, 1) << describe(r);
  ASSERT_EQ(r.error_lines.size(), 1u) << describe(r);
  expect_usage_error(run_cli("predict " + quote(idx_model()) + " --out p.npy"), {"--data"}, "trainkit predict");
}

// A model with two outputs: --out .npz holds one array per output under its output layer's name (Keras'
// model.output_names), each what Model::predict gives; a .npy cannot hold both and says to use .npz.
TEST(CliPredict, SeveralOutputsGoToAnNpzUnderTheirLayersNames) {
  tk::clear_session();
  tk::utils::set_random_seed(3);
  tk::KerasTensor in = tk::Input({6});
  tk::KerasTensor h = tk::layers::Dense(8, "relu")(in);
  tk::KerasTensor cls = tk::layers::Dense(3, "softmax", {.name = "class_head"})(h);
  tk::KerasTensor box = tk::layers::Dense(4, {}, {.name = "box_head"})(h);
  tk::Model model(std::vector<tk::KerasTensor>{in}, std::vector<tk::KerasTensor>{cls, box}, "two_heads");
  const std::string file = path_of("two_heads.keras"), features = path_of("two_heads_x.npy");
  model.save(file);
  tk::Tensor x(tk::Shape{70, 6}, tk::DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 29) % 53) / 53.0f - 0.5f;
  tk::data::save_npy(features, x);

  const std::string out = path_of("two_heads_out.npz");
  const Result r = run_cli("predict " + quote(file) + " --data " + quote(features) + " --out " + quote(out) + " -v 2");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "wrote " + out + "[\"class_head\"]: (70, 3) float32");
  EXPECT_CONTAINS(r.out, "wrote " + out + "[\"box_head\"]: (70, 4) float32");
  const auto arrays = tk::data::load_npz(out);
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].first, "class_head");
  EXPECT_EQ(arrays[1].first, "box_head");
  const std::unique_ptr<tk::Model> m = tk::models::load_model(file, /*compile=*/false);
  const std::vector<tk::Tensor> ref = m->predict(tk::data::Dataset::from_tensor_slices({x}).batch(32));
  ASSERT_EQ(ref.size(), 2u);
  expect_same(arrays[0].second, ref[0]);
  expect_same(arrays[1].second, ref[1]);

  // One output into an .npz works too: the array under its output layer's name.
  const std::string images = path_of("predict_npz_images.npy"), one = path_of("one_output.npz");
  const tk::Tensor idx_x = tk::data::load_idx(plain_data().train_images);
  tk::data::save_npy(images, idx_x);
  const Result single =
      run_cli("predict " + quote(idx_model()) + " --data " + quote(images) + " --out " + quote(one) + " -v 0");
  ASSERT_EQ(single.code, 0) << describe(single);
  const std::unique_ptr<tk::Model> idx = tk::models::load_model(idx_model(), /*compile=*/false);
  const auto one_array = tk::data::load_npz(one);
  ASSERT_EQ(one_array.size(), 1u);
  EXPECT_EQ(one_array[0].first, idx->outputs()[0].node->layer->name);
  expect_same(one_array[0].second, idx->predict(tk::data::Dataset::from_tensor_slices({idx_x}).batch(32))[0]);
  // A .npy for two outputs: one clear error naming both outputs and the way out; no file written.
  const std::string npy = path_of("two_heads_out.npy");
  expect_user_error(run_cli("predict " + quote(file) + " --data " + quote(features) + " --out " + quote(npy)),
                    {"2 outputs", "class_head, box_head", ".npz"});
  EXPECT_FALSE(std::filesystem::exists(npy));
}

// TensorFlow's log filter: TK_CPP_MIN_LOG_LEVEL=1 (or TensorFlow's own TF_CPP_MIN_LOG_LEVEL when trainkit's is unset)
// hides the INFO lines ("Created device ..."), not the predictions' progress (verbose's); a bad value is an error that
// names the variable.
TEST(CliPredict, TheCppMinLogLevelHidesTheInfoLinesAsTensorFlows) {
  const std::string features = path_of("predict_log_x.npy"), out = path_of("predict_log.npy");
  tk::data::save_npy(features, tk::data::load_idx(plain_data().train_images));
  const std::string cmd =
      "predict " + quote(idx_model()) + " --data " + quote(features) + " --out " + quote(out) + " -v 2";
  struct Case {
    std::string env;
    bool device_line;
  };
  for (const Case& c : std::vector<Case>{{"", true},
                                         {"TK_CPP_MIN_LOG_LEVEL=0", true},
                                         {"TK_CPP_MIN_LOG_LEVEL=1", false},
                                         {"TK_CPP_MIN_LOG_LEVEL=3", false},
                                         {"TF_CPP_MIN_LOG_LEVEL=2", false},
                                         {"TF_CPP_MIN_LOG_LEVEL=2 TK_CPP_MIN_LOG_LEVEL=0", true}}) {
    SCOPED_TRACE(c.env);
    const Result r = run_cli(cmd, "env -u TF_CPP_MIN_LOG_LEVEL -u TK_CPP_MIN_LOG_LEVEL " + c.env);
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_EQ(contains(r.out, "Created device cpu:0"), c.device_line) << r.out;
    EXPECT_CONTAINS(r.out, "8/8 [==============================] - ");
    EXPECT_CONTAINS(r.out, "wrote " + out);
  }
  expect_user_error(run_cli(cmd, "TK_CPP_MIN_LOG_LEVEL=info"), {"TK_CPP_MIN_LOG_LEVEL", "'info'", "0"});
}
