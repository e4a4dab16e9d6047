// Model::export_onnx. The committed tests/fixtures/onnx/{mlp,cnn}.onnx were run by onnxruntime and passed
// onnx.checker (check_onnx.py there, result in check_result.json: onnxruntime's outputs equal the predictions in
// predictions.txt within 1e-5). Here: trainkit still exports those bytes and still predicts those values.
// TK_WRITE_FIXTURES=1 rewrites the files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>

#include "fixture.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
namespace fs = std::filesystem;

const fs::path kDir = fs::path(TK_SOURCE_DIR) / "tests/fixtures/onnx";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The MLP and CNN layer sets: Rescaling (fused into staging), Flatten, Dense; Conv2D with "same" and strided
// "valid" padding, MaxPooling2D, BatchNormalization with non-trivial statistics, AveragePooling2D, Dropout,
// and a Flatten of (H, W, C) with C > 1 before a Dense, where channels_last matters.
std::unique_ptr<Sequential> fixture_model(const std::string& which) {
  clear_session();
  utils::set_random_seed(2024);
  using namespace layers;
  std::unique_ptr<Sequential> m;
  if (which == "mlp") {
    m = std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input(Shape{28, 28}), Rescaling(1.0f / 255),
                                                           Flatten(), Dense(32, "relu"), Dropout(0.2f), Dense(10)});
  } else {
    m = std::make_unique<Sequential>(std::vector<LayerPtr>{
        layers::Input(Shape{12, 12, 3}), Rescaling(1.0f / 255), Conv2D(8, 3, "relu", {.padding = "same"}),
        MaxPooling2D(2), Conv2D(16, 3, "linear", {.strides = 2, .padding = "same"}), BatchNormalization(),
        Activation("relu"), AveragePooling2D(1), Flatten(), Dense(24, "tanh"), Dense(5, "softmax")});
  }
  m->predict(Tensor::zeros(which == "mlp" ? Shape{1, 28, 28} : Shape{1, 12, 12, 3}));  // builds the weights
  for (const LayerPtr& l : m->layers())  // BatchNormalization: statistics other than 0 and 1
    if (l->class_name() == "BatchNormalization")
      for (size_t k = 0; k < l->weights().size(); ++k) {
        Tensor& t = l->weights()[k].value;
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data<float>()[i] =
              k == 3 ? float(10 + i) / 20.0f : std::sin(float((i + 1) * (k + 1))) / 2.0f + float(k == 0);
      }
  return m;
}

Tensor fixture_input(const std::string& which, int64_t batch) {
  Tensor x(which == "mlp" ? Shape{batch, 28, 28} : Shape{batch, 12, 12, 3}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float((i * 37 + 11) % 256);
  return x;
}

void write_tensor(std::ofstream& out, const std::string& name, const Tensor& t) {
  out << "tensor " << name << " float32 " << t.shape().rank();
  for (int64_t d : t.shape().dims()) out << " " << d;
  out << "\n" << std::setprecision(9);
  for (int64_t i = 0; i < t.numel(); ++i) out << (i ? " " : "") << t.data<float>()[i];
  out << "\n";
}

TEST(OnnxExport, MlpAndCnnAreTheAcceptedFilesAndPredictTheFixtureValues) {
  const bool write = std::getenv("TK_WRITE_FIXTURES") != nullptr;
  std::ofstream preds;
  if (write) preds.open(kDir / "predictions.txt");
  const auto fixture =
      write ? std::map<std::string, Tensor>{} : testing::load_fixture((kDir / "predictions.txt").string());
  for (const std::string which : {"mlp", "cnn"}) {
    std::unique_ptr<Sequential> model = fixture_model(which);
    const fs::path out = fs::temp_directory_path() / ("tk_onnx_" + which + "_" + std::to_string(getpid()) + ".onnx");
    model->export_onnx(out.string());
    const Tensor x = fixture_input(which, 3);
    const Tensor y = model->predict(x);
    if (write) {
      fs::copy_file(out, kDir / (which + ".onnx"), fs::copy_options::overwrite_existing);
      write_tensor(preds, "x_" + which, x);
      write_tensor(preds, "y_" + which, y);
    }
    EXPECT_EQ(read_bytes(out), read_bytes(kDir / (which + ".onnx"))) << which << ": the export changed";
    if (!write) {
      const Tensor& want = fixture.at("y_" + which);
      ASSERT_EQ(want.shape(), y.shape());
      for (int64_t i = 0; i < y.numel(); ++i)
        EXPECT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-5) << which << " output " << i;
    }
    fs::remove(out);
  }
}

TEST(OnnxExport, AnOpWithoutMappingIsOneErrorAndNoFile) {
  clear_session();
  Sequential m({layers::Input({4, 4, 2}), layers::UpSampling2D(2), layers::Flatten(), layers::Dense(3)});
  const fs::path out = fs::temp_directory_path() / ("tk_onnx_bad_" + std::to_string(getpid()) + ".onnx");
  try {
    m.export_onnx(out.string());
    FAIL() << "exported an UpSampling2D";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("up_sampling2d"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Upsample2D"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace tk
