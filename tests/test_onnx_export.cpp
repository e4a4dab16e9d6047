// Model::export_onnx. The committed tests/fixtures/onnx/{mlp,cnn}.onnx were run by onnxruntime and passed
// onnx.checker (check_onnx.py there, result in check_result.json: onnxruntime's outputs equal the predictions in
// predictions.txt within 1e-5). Here: trainkit still exports those bytes and still predicts those values.
// TK_WRITE_FIXTURES=1 rewrites the files. Likewise norm.onnx and ops.onnx with predictions_general.txt: the general
// tensor ops (LayerNormalization, the Keras activations on the Unary op, and a layer calling every general op).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>

#include "fixture.h"
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
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

// A layer made of the general tensor ops, each function of each once: x (batch, 4, 6) -> (batch, kOpsWidth), every
// part flattened and concatenated. The values stay in each function's domain (logs and roots of exp(x) or |x| + 1/2).
class GeneralOpsLayer final : public Layer {
 public:
  static constexpr int64_t kOpsWidth = 1058;
  GeneralOpsLayer() : Layer("general_ops") {}
  std::string class_name() const override { return "GeneralOps"; }
  Shape build(const std::vector<Shape>& in) override {
    if (!built_) {
      add_weight("w", Shape{6}, "random_normal");
      add_weight("table", Shape{6, 3}, "random_normal");
      add_weight("grid", Shape{4, 6}, "random_normal");
    }
    return Shape{in[0][0], kOpsWidth};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    using graph::BinaryFn;
    using graph::ReduceFn;
    using graph::UnaryFn;
    namespace o = graph::ops;
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int x = in[0];
    const int64_t batch = ctx.g[x].shape[0];
    const int w = ctx.variable(weights_[0]), table = ctx.variable(weights_[1]), grid = ctx.variable(weights_[2]);
    std::vector<int> parts;
    auto part = [&](int v) {
      const Shape s = ctx.g[v].shape;
      parts.push_back(o::reshape(b, v, Shape{batch, s.numel() / batch}));
    };
    auto c = [&](float v) { return o::scalar(b, v, x); };
    const int positive = o::unary(b, UnaryFn::exp, x);
    const int half_up = o::add_scalar(b, o::unary(b, UnaryFn::abs, x), 0.5f);
    for (int f = 0; f < graph::kUnaryFnCount; ++f) {
      const auto fn = static_cast<UnaryFn>(f);
      const bool domain = fn == UnaryFn::log || fn == UnaryFn::sqrt || fn == UnaryFn::rsqrt || fn == UnaryFn::log1p;
      const float p0 = fn == UnaryFn::clip ? -0.5f : fn == UnaryFn::elu ? 0.7f : 0.1f;
      const int v = o::unary(b, fn, fn == UnaryFn::reciprocal ? half_up : domain ? positive : x, p0, 0.8f);
      part(o::reduce(b, ReduceFn::mean, v, {2}, false));  // (batch, 4)
    }
    for (BinaryFn f : {BinaryFn::add, BinaryFn::subtract, BinaryFn::multiply, BinaryFn::divide, BinaryFn::maximum,
                       BinaryFn::minimum, BinaryFn::squared_difference, BinaryFn::floor_divide, BinaryFn::mod})
      part(o::binary(b, f, x, w));  // (batch, 4, 6) with (6)
    part(o::binary(b, BinaryFn::power, positive, w));
    // Integers: x * 4 (x is on a grid of 1/4) over divisors (|x| + 1/2) * 4 >= 2, each function, cast back to float.
    const int xi = o::cast(b, o::mul_scalar(b, x, 4.0f), DType::i32);
    const int di = o::cast(b, o::mul_scalar(b, half_up, 4.0f), DType::i32);
    for (BinaryFn f : {BinaryFn::add, BinaryFn::subtract, BinaryFn::multiply, BinaryFn::maximum, BinaryFn::minimum,
                       BinaryFn::squared_difference, BinaryFn::floor_divide, BinaryFn::mod})
      part(o::cast(b, o::binary(b, f, xi, di), DType::f32));
    part(o::cast(b, o::binary(b, BinaryFn::power, xi, o::cast(b, c(3.0f), DType::i32)), DType::f32));
    part(o::where(b, o::compare(b, BinaryFn::less, xi, di), x, c(-3.0f)));
    for (ReduceFn f : {ReduceFn::sum, ReduceFn::max, ReduceFn::min, ReduceFn::prod})
      part(o::cast(b, o::reduce(b, f, xi, {2}, false), DType::f32));  // (batch, 4)
    part(o::cast(b, o::arg_reduce(b, ReduceFn::max, xi, 2, false), DType::f32));
    for (BinaryFn f : {BinaryFn::equal, BinaryFn::not_equal, BinaryFn::less, BinaryFn::less_equal, BinaryFn::greater,
                       BinaryFn::greater_equal})  // x is on a grid of 1/4: some elements equal 0.5
      part(o::where(b, o::compare(b, f, x, c(0.5f)), x, c(-3.0f)));
    for (int f = 0; f < graph::kReduceFnCount; ++f) {
      part(o::reduce(b, static_cast<ReduceFn>(f), x, {1}, false));
      part(o::reduce(b, static_cast<ReduceFn>(f), x, {1, 2}, true));
    }
    const int arg_max = o::arg_reduce(b, ReduceFn::max, x, 2, false);  // (batch, 4) int32
    const int arg_min = o::arg_reduce(b, ReduceFn::min, x, -1, true);  // (batch, 4, 1)
    part(o::one_hot(b, arg_max, 6));                                   // (batch, 4, 6)
    const int shifted = o::cast(b, o::add_scalar(b, o::cast(b, arg_min, DType::f32), -2.0f), DType::i32);
    part(o::one_hot(b, shifted, 6));                            // negative indices: rows of 0s
    part(o::gather(b, table, arg_max, 0));                      // (batch, 4, 3)
    part(o::gather(b, x, o::cast(b, c(2.0f), DType::i32), 2));  // (batch, 4)
    part(o::transpose(b, x, {0, 2, 1}));
    part(o::batch_matmul(b, x, x, false, true));  // (batch, 4, 4)
    part(o::batch_matmul(b, x, x, true, false));  // (batch, 6, 6)
    part(o::broadcast_to(b, grid, Shape{batch, 4, 6}));
    part(o::pad(b, x, {0, 1, 0}, {0, 2, 1}, 0.5f));
    const std::vector<int> halves = o::split(b, x, 1, {1, 3});
    part(o::concat(b, {halves[1], halves[0]}, 1));
    part(o::slice(b, x, -1, 2, 3));
    graph::Attrs fill;  // a batch-sized constant
    fill.shape = Shape{batch, 3};
    fill.value = 0.25f;
    part(b.add(graph::Op::Fill, {}, fill));
    const int y = o::concat(b, parts, 1);
    if (ctx.g[y].shape[1] != kOpsWidth)
      throw InvalidArgument("GeneralOpsLayer: width " + std::to_string(ctx.g[y].shape[1]));
    return y;
  }
};

// "norm": LayerNormalization (over a non-trailing axis, the last, and rms_scaling) between Dense layers with the Keras
// activations the Unary op computes, log_softmax (a logsumexp Reduce) last; "ops": GeneralOpsLayer.
std::unique_ptr<Sequential> general_model(const std::string& which) {
  clear_session();
  utils::set_random_seed(2025);
  using namespace layers;
  std::unique_ptr<Sequential> m;
  if (which == "norm") {
    m = std::make_unique<Sequential>(std::vector<LayerPtr>{
        layers::Input(Shape{4, 6}), LayerNormalization({.axis = {1}}), Dense(16, "silu"), LayerNormalization(),
        Dense(16, "mish"), Activation("hard_swish"), Dense(12, "selu"), Dense(12, "softplus"), Activation("relu6"),
        Dense(12, "softsign"), Activation("hard_sigmoid"), Dense(10, "log_sigmoid"), Dense(10, "gelu"),
        Activation("exponential"), Flatten(), LayerNormalization({.rms_scaling = true}), Dense(8, "swish"),
        Dense(6, "log_softmax")});
  } else {
    m = std::make_unique<Sequential>(
        std::vector<LayerPtr>{layers::Input(Shape{4, 6}), std::make_shared<GeneralOpsLayer>()});
  }
  m->predict(Tensor::zeros(Shape{1, 4, 6}));  // builds the weights
  for (const LayerPtr& l : m->layers())       // LayerNormalization: gamma and beta other than 1 and 0
    if (l->class_name() == "LayerNormalization")
      for (size_t k = 0; k < l->weights().size(); ++k) {
        Tensor& t = l->weights()[k].value;
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data<float>()[i] = k == 0 ? 1.0f + std::sin(float(i + 1)) / 4.0f : std::cos(float(i + 1)) / 5.0f;
      }
  return m;
}

Tensor general_input(int64_t batch) {
  Tensor x(Shape{batch, 4, 6}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)  // in [-2, 2], on a grid of 1/4: ties for the comparisons and arg-reduces
    x.data<float>()[i] = std::round(std::sin(float(i) * 0.37f) * 8.0f) / 4.0f;
  return x;
}

TEST(OnnxExport, GeneralOpsAreTheAcceptedFilesAndPredictTheFixtureValues) {
  const bool write = std::getenv("TK_WRITE_FIXTURES") != nullptr;
  std::ofstream preds;
  if (write) preds.open(kDir / "predictions_general.txt");
  const auto fixture =
      write ? std::map<std::string, Tensor>{} : testing::load_fixture((kDir / "predictions_general.txt").string());
  for (const std::string which : {"norm", "ops"}) {
    std::unique_ptr<Sequential> model = general_model(which);
    const fs::path out = fs::temp_directory_path() / ("tk_onnx_" + which + "_" + std::to_string(getpid()) + ".onnx");
    model->export_onnx(out.string());
    const Tensor x = general_input(3);
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
