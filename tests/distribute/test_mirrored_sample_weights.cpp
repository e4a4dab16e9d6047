// Keras' sample_weight and class_weight under MirroredStrategy (issue 33): each replica weights its rows' losses and
// divides by the whole batch's row count (its gradient scaled by its share), so two and three replicas train Keras'
// own steps (tests/fixtures/keras/sample_weights: batches of 4 rows, the last of 2, split 2/2 and 2/1/1, 1/1 and
// 1/1/0 across the replicas).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "distribute/replica_test_support.h"
#include "keras_text_fixture.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/distribute.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/sample_weights/";

void expect_keras_weights_on_replicas(const std::string& name, int replicas) {
  testing::split_cpu();  // before any tensor exists
  const auto f = testing::load_keras_text(kDir + "sample_weights_expect.txt");
  std::unique_ptr<Model> m = models::load_model(kDir + name + ".keras", /*compile=*/false);
  {
    distribute::MirroredStrategy strategy(testing::first_cpus(replicas));
    auto scope = strategy.scope();
    m->compile(optimizers::SGD({.learning_rate = 0.1f}), losses::SparseCategoricalCrossentropy({.from_logits = true}),
               {"accuracy"});
  }
  ASSERT_NE(m->distribute_strategy().find(std::to_string(replicas) + " replicas in sync"), std::string::npos);
  FitOptions o;
  o.batch_size = 4;
  o.verbose = 0;
  o.shuffle = false;
  if (name == "sparse") o.sample_weight = f.at("sparse/sample_weight");
  if (name == "classes") o.class_weight = {{0, 1.0f}, {1, 5.0f}, {2, 0.5f}};
  const History h = m->fit(f.at(name + "/x"), f.at(name + "/y").to(DType::i32), o);
  const double want_loss = f.at(name + "/fit/loss").data<float>()[0];
  EXPECT_NEAR(h.history.at("loss").back(), want_loss, 1e-5 * std::max(1.0, std::abs(want_loss)));
  const std::vector<Tensor> w = m->get_weights();
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& want = f.at(name + "/weight/" + std::to_string(i));
    ASSERT_EQ(w[i].numel(), want.numel());
    for (int64_t k = 0; k < want.numel(); ++k) {
      const float b = want.data<float>()[k];
      EXPECT_NEAR(w[i].data<float>()[k], b, 1e-5 * std::max(std::abs(b), 0.1f)) << name << " weight " << i;
    }
  }
}

TEST(MirroredStrategy, SampleWeightsOnTwoAndThreeReplicasTrainAsKeras) {
  for (int replicas : {2, 3}) {
    SCOPED_TRACE(replicas);
    expect_keras_weights_on_replicas("sparse", replicas);
    expect_keras_weights_on_replicas("classes", replicas);
  }
}

}  // namespace
}  // namespace tk
