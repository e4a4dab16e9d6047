// LayerNormalization, the composite layer (src/nn/layers/layer_normalization.cpp), against Keras 3.15.1: forward
// values and the gradients of sum(y * dy) for x, gamma and beta over six configurations (axes, epsilon, center,
// scale, rms_scaling), and a Keras-saved model holding one: its predictions, one SGD step's weights, and the file
// trainkit saves back. Fixtures: tests/fixtures/keras/layer_norm/ (gen_layer_norm.py beside them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/layer_norm/";

// The fixtures' line format: "NAME D0 D1 ... : V0 V1 ..." (gen_layer_norm.py); "case"/"config"/"end" lines group
// the records of one case.
struct Record {
  Shape shape;
  std::vector<float> values;
};
struct FixtureCase {
  std::string id, config;
  std::map<std::string, Record> r;
};

Record parse_record(const std::string& line, std::string& name) {
  const size_t colon = line.find(':');
  std::istringstream head(line.substr(0, colon)), values(line.substr(colon + 1));
  head >> name;
  std::vector<int64_t> dims;
  for (int64_t d; head >> d;) dims.push_back(d);
  Record rec{Shape(dims), {}};
  for (float v; values >> v;) rec.values.push_back(v);
  return rec;
}

std::vector<FixtureCase> read_cases(const std::string& path, std::map<std::string, Record>* loose = nullptr) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open fixture " + path);
  std::vector<FixtureCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("case ", 0) == 0) {
      cases.push_back({line.substr(5), {}, {}});
    } else if (line.rfind("config ", 0) == 0) {
      cases.back().config = line.substr(7);
    } else if (line != "end") {
      std::string name;
      Record rec = parse_record(line, name);
      if (rec.values.size() != static_cast<size_t>(rec.shape.numel()))
        throw FormatError(path + ": record " + name + " has " + std::to_string(rec.values.size()) + " values");
      if (cases.empty() && !loose) throw FormatError(path + ": record " + name + " outside a case");
      (cases.empty() ? *loose : cases.back().r)[name] = std::move(rec);
    }
  }
  return cases;
}

std::string config_value(const std::string& config, const std::string& key) {
  std::istringstream s(config);
  for (std::string kv; s >> kv;)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return {};
}

Tensor tensor_of(const Record& r) {
  Tensor t(r.shape, DType::f32);
  std::copy(r.values.begin(), r.values.end(), t.data<float>());
  return t;
}

// |got - want| <= 1e-6 * max(1, |want|) elementwise (float32 results of the same formulas, rounded differently).
void expect_near(const Tensor& got, const Record& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape) << what;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.values[static_cast<size_t>(i)];
    worst = std::max(worst, std::abs(got.data<float>()[i] - w) / std::max(1.0, std::abs(w)));
  }
  EXPECT_LE(worst, tol) << what;
}

layers::LayerNormalizationOptions options_of(const std::string& config) {
  layers::LayerNormalizationOptions o;
  o.axis.clear();
  std::istringstream axes(config_value(config, "axis"));
  for (std::string a; std::getline(axes, a, ',');) o.axis.push_back(std::stoi(a));
  o.epsilon = std::stof(config_value(config, "epsilon"));
  o.center = config_value(config, "center") == "1";
  o.scale = config_value(config, "scale") == "1";
  o.rms_scaling = config_value(config, "rms_scaling") == "1";
  return o;
}

// Each case through the fused ops where the layer takes them (the trailing axes with gamma and beta) and through the
// composite of the general ops (TK_FUSE=0) everywhere.
class LayerNormKeras : public ::testing::TestWithParam<std::tuple<FixtureCase, bool>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam())) setenv("TK_FUSE", "0", 1);
  }
  void TearDown() override { unsetenv("TK_FUSE"); }
};

TEST_P(LayerNormKeras, ForwardAndGradientsWithin1e6) {
  const FixtureCase& c = std::get<0>(GetParam());
  const Tensor x = tensor_of(c.r.at("x")), dy = tensor_of(c.r.at("dy"));
  LayerPtr layer = layers::LayerNormalization(options_of(c.config));
  (*layer)(tk::Input(x.shape().sample_shape()));
  const bool has_gamma = config_value(c.config, "has_gamma") == "1";
  const bool has_beta = config_value(c.config, "has_beta") == "1";
  ASSERT_EQ(layer->weights().size(), size_t(has_gamma) + size_t(has_beta)) << "the weights Keras creates";
  size_t w = 0;
  for (const char* name : {"gamma", "beta"}) {
    if (!c.r.count(name)) continue;
    const Tensor v = tensor_of(c.r.at(name));
    ASSERT_EQ(layer->weights()[w].value.shape(), v.shape()) << name;
    std::memcpy(layer->weights()[w++].value.raw(), v.raw(), v.nbytes());
  }
  Tensor xv = x.clone(), dyv = dy.clone();
  graph::Graph g;
  nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
  const int xi = g.variable("x", xv);
  const int y = layer->call(ctx, {xi});
  graph::OpBuilder b{g, nullptr, "loss"};
  std::vector<int> all(static_cast<size_t>(x.shape().rank()));
  std::iota(all.begin(), all.end(), 0);
  const int loss = graph::ops::reduce(
      b, graph::ReduceFn::sum, graph::ops::binary(b, graph::BinaryFn::multiply, y, g.variable("dy", dyv)), all, false);
  std::vector<int> wrt{xi};
  for (const Weight& wt : layer->weights()) wrt.push_back(ctx.variable(wt));
  const std::vector<int> grads = graph::gradients(g, {loss}, wrt);
  std::vector<int> outs{y};
  for (int gr : grads) {
    ASSERT_GE(gr, 0);
    outs.push_back(gr);
  }
  graph::Program p(std::move(g), outs, {}, Device::cpu());
  p.run(graph::ExecContext{});
  expect_near(p.output(y), c.r.at("y"), 1e-6, "y");
  expect_near(p.output(grads[0]), c.r.at("dx"), 1e-6, "dx");
  size_t k = 1;
  if (has_gamma) expect_near(p.output(grads[k++]), c.r.at("dgamma"), 1e-6, "dgamma");
  if (has_beta) expect_near(p.output(grads[k++]), c.r.at("dbeta"), 1e-6, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LayerNormKeras,
                         ::testing::Combine(::testing::ValuesIn(read_cases(kDir + "layer_norm_expect.txt")),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<FixtureCase, bool>>& i) {
                           return std::get<0>(i.param).id + (std::get<1>(i.param) ? "_composite" : "_fused");
                         });

// The layer takes the fused ops for the trailing axes with gamma and beta, the composite otherwise.
TEST(LayerNorm, FusedOpsForTheCommonCaseTheCompositeOtherwise) {
  auto ops_of = [](layers::LayerNormalizationOptions o, Shape in) {
    LayerPtr layer = layers::LayerNormalization(std::move(o));
    (*layer)(tk::Input(in.sample_shape()));
    graph::Graph g;
    nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
    layer->call(ctx, {g.placeholder_variable("x", in)});
    std::set<graph::Op> seen;
    for (const graph::Node& n : g.nodes) seen.insert(n.op);
    return seen;
  };
  EXPECT_TRUE(ops_of({}, Shape{4, 8}).count(graph::Op::LayerNormApply));
  layers::LayerNormalizationOptions two;
  two.axis = {1, 2};
  EXPECT_TRUE(ops_of(two, Shape{2, 3, 4}).count(graph::Op::LayerNormApply));
  layers::LayerNormalizationOptions middle;
  middle.axis = {1};
  EXPECT_FALSE(ops_of(middle, Shape{2, 3, 4}).count(graph::Op::LayerNormApply));
  layers::LayerNormalizationOptions rms;
  rms.rms_scaling = true;
  EXPECT_FALSE(ops_of(rms, Shape{4, 8}).count(graph::Op::LayerNormApply));
  setenv("TK_FUSE", "0", 1);
  EXPECT_FALSE(ops_of({}, Shape{4, 8}).count(graph::Op::LayerNormApply));
  unsetenv("TK_FUSE");
}

std::map<std::string, Record> model_records() {
  std::map<std::string, Record> r;
  read_cases(kDir + "ln_model_expect.txt", &r);
  return r;
}

// A Keras-saved Dense -> LayerNormalization -> Dense model: predictions, one SGD step (Keras' train_on_batch) and the
// weights after it, then saved by trainkit and loaded back with the same weights and predictions.
TEST(LayerNormKerasModel, LoadsPredictsTrainsOneStepAndSavesBack) {
  const auto r = model_records();
  auto model = models::load_model(kDir + "ln_model.keras");
  const Tensor x = tensor_of(r.at("x"));
  Tensor labels(r.at("labels").shape, DType::i32);
  for (int64_t i = 0; i < labels.numel(); ++i)
    labels.data<int32_t>()[i] = static_cast<int32_t>(r.at("labels").values[static_cast<size_t>(i)]);
  expect_near(model->predict(x), r.at("predict"), 1e-6, "predict");
  const Logs& logs = model->train_on_batch({x}, {labels});
  EXPECT_NEAR(logs.get("loss"), r.at("train_loss").values[0], 1e-6);
  for (const LayerPtr& layer : model->layers())
    for (const Weight& w : layer->weights()) {
      const std::string key = "after/" + w.name;
      ASSERT_TRUE(r.count(key)) << key;
      expect_near(w.value, r.at(key), 1e-6, key);
    }
  expect_near(model->predict(x), r.at("predict_after"), 1e-5, "predict after the step");
  const std::string path = ::testing::TempDir() + "/ln_roundtrip.keras";
  model->save(path);
  auto back = models::load_model(path);
  const Tensor a = model->predict(x), c = back->predict(x);
  ASSERT_EQ(a.shape(), c.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], c.data<float>()[i]) << i;
  std::filesystem::remove(path);
}

TEST(LayerNorm, RefusesTheBatchAxisAndUnknownSizes) {
  layers::LayerNormalizationOptions o;
  o.axis = {0};
  EXPECT_THROW((*layers::LayerNormalization(o))(tk::Input({4})), InvalidArgument);
  o.axis = {3};
  EXPECT_THROW((*layers::LayerNormalization(o))(tk::Input({4, 5})), InvalidArgument);
  o.axis = {};
  EXPECT_THROW(layers::LayerNormalization(o), InvalidArgument);
}

}  // namespace
}  // namespace tk
