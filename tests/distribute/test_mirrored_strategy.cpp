// MirroredStrategy over logical cpu devices is the same computation as one device on the global batch: the
// weights after every step match a single-device run (per tensor max|d| / max|w| <= 1e-5), the way PyTorch's
// DDP tests check DistributedDataParallel. Runs in its own process (CTest: TK_MEMORY_LIMIT=3GiB): the cpu is
// split into cpu:0..cpu:2 before first use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "backends/cpu/threads.h"
#include "distribute/replica_test_support.h"
#include "nn/distribute/strategy_state.h"
#include "test_data.h"
#include "trainkit/nn/distribute.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

using testing::split_cpu;
std::vector<Device> first_devices(int n) { return testing::first_cpus(n); }

using Recorder = testing::StepRecorder;

using Factory = std::function<std::unique_ptr<Model>()>;

std::unique_ptr<Model> mlp() {
  return std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({784}), layers::Dense(256, "relu"),
                                                            layers::Dense(128, "relu"), layers::Dense(10)});
}
std::unique_ptr<Model> cnn() { return models::tutorial_cnn(); }

struct Trained {
  std::vector<std::vector<Tensor>> weights;
  std::vector<double> loss;
  std::string strategy;
  int64_t all_reduces = 0;    // collectives replica 0 completed
  int last_participants = 0;  // replicas that ran the last step
};

// Trains one epoch of `batch` rows per step (shuffled with a fixed seed), one device or replicated.
// SGD (Keras' defaults): each update is linear in the gradient, so the weights differ by the gradients' rounding
// alone. Adam divides by sqrt(v) + 1e-7: where a gradient element is near 1e-7 (there are some in every large
// tensor), a rounding difference in it moves that element's update by up to a few percent of the learning rate,
// whichever way the sum is split (a different thread count on one device does the same).
enum class Opt { sgd, adam };

Trained train(const Factory& make, const Tensor& x, const Tensor& y, int64_t batch, int replicas, int64_t micro = 0,
              Opt opt = Opt::sgd, int epochs = 1, size_t bytes_per_pack = 0, bool every_replica = false) {
  utils::set_random_seed(7);
  std::unique_ptr<Model> m = make();
  auto compile = [&] {
    m->compile(opt == Opt::sgd ? optimizers::SGD() : optimizers::Adam(),
               losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  };
  std::optional<distribute::MirroredStrategy> strategy;
  if (replicas > 0) {
    strategy.emplace(first_devices(replicas), distribute::MirroredStrategy::Options{.bytes_per_pack = bytes_per_pack});
    strategy->state()->every_replica_every_step = every_replica;  // as under NCCL (GPUs)
    auto scope = strategy->scope();
    compile();
  } else {
    compile();
  }
  auto rec = std::make_shared<Recorder>();
  m->fit(
      x, y,
      {.batch_size = batch, .epochs = epochs, .verbose = 0, .callbacks = {rec}, .seed = 11, .micro_batch_size = micro});
  return {rec->after_step, rec->loss, m->distribute_strategy(),
          strategy ? strategy->state()->collective->collectives() : 0,
          strategy ? strategy->state()->collective->participants() : 0};
}

// Per tensor, max|a - b| / max|a| after every step.
// tolerance applies to the first `strict_steps` steps, `later` (when > 0) to the rest.
double expect_same_weights(const Trained& one, const Trained& many, const char* what, double tolerance = 1e-5,
                           size_t strict_steps = SIZE_MAX, double later = 0, double loss_tolerance = 1e-4) {
  EXPECT_EQ(one.weights.size(), many.weights.size()) << what;
  if (one.weights.size() != many.weights.size()) return 1.0;
  double worst = 0;
  for (size_t s = 0; s < one.weights.size(); ++s) {
    if (one.weights[s].size() != many.weights[s].size()) return 1.0;
    for (size_t t = 0; t < one.weights[s].size(); ++t) {
      const Tensor& a = one.weights[s][t];
      const Tensor& b = many.weights[s][t];
      if (a.shape() != b.shape()) return 1.0;
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        diff = std::max(diff, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
        scale = std::max(scale, double(std::fabs(a.data<float>()[i])));
      }
      const double rel = scale > 0 ? diff / scale : diff;
      worst = std::max(worst, rel);
      const double limit = s < strict_steps ? tolerance : later;
      EXPECT_LE(rel, limit) << what << ": step " << s + 1 << ", weight " << t;
      if (rel > limit) return worst;
    }
    EXPECT_NEAR(one.loss[s], many.loss[s], loss_tolerance * std::max(1.0, std::fabs(one.loss[s])))
        << what << " step " << s + 1;
  }
  std::printf("%s: %zu steps, worst per-tensor max|d|/max|w| = %.3g\n", what, one.weights.size(), worst);
  return worst;
}

TEST(MirroredStrategy, MlpOnTwoAndThreeReplicasEqualsOneDeviceAfterEveryStep) {
  split_cpu();
  // 20 full steps of 128 and a last one of 2 rows (fewer rows than three replicas).
  const int64_t n = 20 * 128 + 2;
  const Tensor x = testing::uniform({n, 784}, 1), y = testing::int_labels(n, 10, 2);
  const Trained one = train(mlp, x, y, 128, 0);
  ASSERT_EQ(one.weights.size(), 21u);
  for (int replicas : {2, 3}) {
    const Trained many = train(mlp, x, y, 128, replicas);
    EXPECT_EQ(many.strategy, replicas == 2 ? "MirroredStrategy over cpu:0, cpu:1 (2 replicas in sync)"
                                           : "MirroredStrategy over cpu:0, cpu:1, cpu:2 (3 replicas in sync)");
    expect_same_weights(one, many, replicas == 2 ? "mlp, 2 replicas" : "mlp, 3 replicas");
  }
}

// The tutorial CNN on one device is itself chaotic in how its sums are split: 2 threads against 1 differ by 1.85e-5
// at step 4, 2.2e-3 at step 5 and 2.1e-2 at step 6; the same batch in two micro-batches of 64 against whole, by
// 1e-2 at step 20 (a relu or max-pooling decision on a near-tie flips and routes a whole gradient element elsewhere;
// measured without dropout too). So no split of the batch can match one device to 1e-5 for 20 steps. Replicas run
// 1 kernel thread each here, so the reference is one device at 1 thread. Here the first flip comes at step 13 (2
// replicas) and 16 (3); another CPU's kernels (or another build) flip elsewhere, so the first 5 steps must match
// within 1e-5 and the loss of every step within 1e-3. Skipped under ASan (3 minutes there; Release CI runs it).
// One GEMM engine for every shape: TK_GEMM=auto times both engines per shape, and on a loaded machine the whole
// batch's shapes and a replica's share (64 or 43 rows) can choose differently; their roundings then differ by ~1e-7
// per step and the dropout CNN grows that to 5.8e-4 by step 5 (3 replicas, measured at load 13). The engines
// themselves are compared in test_fuse.cpp.
TEST(MirroredStrategy, TutorialCnnWithDropoutOnTwoAndThreeReplicasEqualsOneDevice) {
  if (testing::kAsan) GTEST_SKIP() << "60 CNN steps take 3 minutes under AddressSanitizer; the Release run checks this";
  setenv("TK_GEMM", "openblas", 1);
  struct Unset {
    ~Unset() { unsetenv("TK_GEMM"); }
  } unset;
  split_cpu();
  const int64_t n = 20 * 128;
  const Tensor x = testing::uniform({n, 28, 28}, 3), y = testing::int_labels(n, 10, 4);
  cpu::pin_threads(1);
  const Trained one = train(cnn, x, y, 128, 0);
  cpu::pin_threads(2);
  expect_same_weights(one, train(cnn, x, y, 128, 2), "cnn, 2 replicas", 1e-5, 5, 1.0, 1e-3);
  expect_same_weights(one, train(cnn, x, y, 128, 3), "cnn, 3 replicas", 1e-5, 5, 1.0, 1e-3);
}

// Adam (the default MLP's optimizer) divides by sqrt(v) + 1e-7, so an element whose gradient is near 1e-7 takes an
// update that depends on its last bits: 1.46e-5 measured (a first-layer bias at step 1, 3 replicas), while one
// device summing the same step in two micro-batches differs from itself by 3.4e-6. Checked at 5e-5.
TEST(MirroredStrategy, WithAdamTheMlpStaysWithinFiveTimesTheTarget) {
  split_cpu();
  const int64_t n = 20 * 128;
  const Tensor x = testing::uniform({n, 784}, 1), y = testing::int_labels(n, 10, 2);
  const Trained one = train(mlp, x, y, 128, 0, 0, Opt::adam);
  expect_same_weights(one, train(mlp, x, y, 128, 0, 64, Opt::adam),
                      "mlp, adam, one device: whole batch vs 2 micro-batches", 5e-5);
  for (int replicas : {2, 3})
    expect_same_weights(one, train(mlp, x, y, 128, replicas, 0, Opt::adam), "mlp, adam, replicas", 5e-5);
}

// A batch with fewer rows than replicas runs on fewer replicas: the others miss that step's update and must take
// replica 0's weights and slots again before the next epoch's first step.
TEST(MirroredStrategy, ReplicasThatSatOutAStepCatchUpBeforeTheNext) {
  split_cpu();
  const int64_t n = 5 * 128 + 2;  // each epoch ends with a batch of 2 rows on 3 replicas
  const Tensor x = testing::uniform({n, 784}, 7), y = testing::int_labels(n, 10, 8);
  const Trained one = train(mlp, x, y, 128, 0, 0, Opt::adam, 3);
  const Trained many = train(mlp, x, y, 128, 3, 0, Opt::adam, 3);
  expect_same_weights(one, many, "mlp, adam, 3 replicas, 3 epochs ending in 2-row batches", 5e-5);
}

// Under NCCL (replicas on GPUs) every replica must take part in every all-reduce, so a batch with fewer rows than
// replicas runs one row with weight 0 on the replicas without rows, which then stay in step instead of catching up.
// The same rule on the cpu replicas (the flag the NCCL strategy sets): the same weights as one device, whole batches
// and micro-batches.
TEST(MirroredStrategy, EveryReplicaRunsEveryStepWithAWeightZeroRowAsUnderNccl) {
  split_cpu();
  const int64_t n = 5 * 128 + 2;  // each epoch ends with a batch of 2 rows on 3 replicas
  const Tensor x = testing::uniform({n, 784}, 7), y = testing::int_labels(n, 10, 8);
  const Trained one = train(mlp, x, y, 128, 0, 0, Opt::adam, 3);
  const Trained many = train(mlp, x, y, 128, 3, 0, Opt::adam, 3, 0, true);
  expect_same_weights(one, many, "mlp, adam, 3 replicas all in every step, 2-row batches", 5e-5);
  EXPECT_EQ(many.last_participants, 3) << "the last step (2 rows) ran on every replica";
  EXPECT_EQ(train(mlp, x, y, 128, 3, 0, Opt::adam, 1).last_participants, 2) << "without the flag: on 2 of them";
  const Trained micro = train(mlp, x, y, 128, 3, 16, Opt::adam, 2, 0, true);
  expect_same_weights(train(mlp, x, y, 128, 0, 16, Opt::adam, 2), micro,
                      "mlp, adam, micro-batches of 16, 3 replicas all in every step", 5e-5);
}

TEST(MirroredStrategy, MicroBatchesPerReplicaWithOneAllReducePerStep) {
  split_cpu();
  const int64_t n = 10 * 96;
  const Tensor x = testing::uniform({n, 784}, 5), y = testing::int_labels(n, 10, 6);
  const Trained one = train(mlp, x, y, 96, 0, /*micro=*/16);
  const Trained many = train(mlp, x, y, 96, 2, /*micro=*/16);  // 48 rows per replica: 3 micro-batches each
  expect_same_weights(one, many, "mlp, 2 replicas, micro-batches of 16");
}

// Buckets change how many collectives run, not what they sum: each element is still the sum of the same replicas'
// values in replica order, so the weights are the same bits as with one all-reduce per gradient.
TEST(MirroredStrategy, GradientBucketsGiveTheBitsOfOneAllReducePerGradient) {
  split_cpu();
  const int64_t n = 6 * 64 + 3;  // 7 steps, the last of 3 rows
  const Tensor x = testing::uniform({n, 784}, 8), y = testing::int_labels(n, 10, 9);
  const Trained alone = train(mlp, x, y, 64, 2, 0, Opt::adam, 1, /*bytes_per_pack=*/1);
  const Trained packed = train(mlp, x, y, 64, 2, 0, Opt::adam, 1);  // 25 MiB: the MLP's 6 gradients in one bucket
  const Trained split = train(mlp, x, y, 64, 2, 0, Opt::adam, 1, 200 * 1024);  // several buckets
  EXPECT_EQ(alone.all_reduces, 7 * 6);
  EXPECT_EQ(packed.all_reduces, 7);
  EXPECT_GT(split.all_reduces, 7);
  EXPECT_LT(split.all_reduces, 7 * 6);
  expect_same_weights(alone, packed, "mlp, 2 replicas, one bucket against one all-reduce per gradient", 0.0);
  expect_same_weights(alone, split, "mlp, 2 replicas, 200 KiB buckets against one all-reduce per gradient", 0.0);
  // Micro-batching: the accumulators are reduced (and cleared) in buckets too, once per step.
  const Trained micro_alone = train(mlp, x, y, 64, 2, 16, Opt::sgd, 1, 1);
  const Trained micro_packed = train(mlp, x, y, 64, 2, 16, Opt::sgd, 1);
  EXPECT_EQ(micro_packed.all_reduces, 7);
  expect_same_weights(micro_alone, micro_packed, "mlp, 2 replicas, micro-batches, buckets", 0.0);
}

TEST(MirroredStrategy, EachReplicaRunsOnItsOwnDeviceUnderItsOwnBudget) {
  split_cpu();
  distribute::MirroredStrategy s(first_devices(2));
  utils::set_random_seed(7);
  std::unique_ptr<Model> m = mlp();
  {
    auto scope = s.scope();
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  }
  EXPECT_EQ(m->device(), Device::cpu(0));
  std::ostringstream summary;
  m->summary(summary);
  EXPECT_NE(summary.str().find("Distribute strategy: MirroredStrategy over cpu:0, cpu:1 (2 replicas in sync)"),
            std::string::npos)
      << summary.str();
  const size_t before = config::get_memory_info(Device::cpu(1)).current;
  const Tensor x = testing::uniform({256, 784}, 1), y = testing::int_labels(256, 10, 2);
  const History h = m->fit(x, y, {.batch_size = 128, .verbose = 0});
  // The epoch's all-reduce time: replica 0's time in collectives per step, a fraction of the steps' time.
  ASSERT_EQ(h.history.count("allreduce_ms_per_step"), 1u);
  EXPECT_GT(h.history.at("allreduce_ms_per_step")[0], 0.0);
  EXPECT_GT(h.history.at("allreduce_fraction")[0], 0.0);
  EXPECT_LT(h.history.at("allreduce_fraction")[0], 1.0);
  const size_t weights = static_cast<size_t>(m->count_params()) * 4;
  // Replica 1 holds its own copy of the weights and the Adam slots (3x the weights) and its program arena.
  EXPECT_GE(config::get_memory_info(Device::cpu(1)).current - before, 3 * weights);
  EXPECT_THROW(m->set_device(Device::cpu(2)), InvalidArgument) << "the strategy places the replicas";
  // train_on_batch and evaluate work too (evaluate divides its batches: test_mirrored_evaluate.cpp).
  const Logs& l = m->train_on_batch({x.slice_rows(0, 64)}, {y.slice_rows(0, 64)});
  EXPECT_TRUE(std::isfinite(l.get("loss")));
  EXPECT_TRUE(std::isfinite(m->evaluate(x, y).get("loss")));
}

// BatchNormalization between a Dense or Conv2D layer and its relu: its statistics are per replica unless synchronized.
// No bias before it (as Keras models do): its gradient is 0 up to rounding, so that bias would be rounding noise.
Factory dense_bn(bool synchronized) {
  return [=] {
    return std::make_unique<Sequential>(std::vector<LayerPtr>{
        layers::Input({784}), layers::Dense(64, "linear", {.use_bias = false}),
        layers::BatchNormalization({.synchronized = synchronized}), layers::Activation("relu"), layers::Dense(10)});
  };
}
Factory conv_bn(bool synchronized, Remat remat = Remat::automatic) {
  return [=] {
    auto m = std::make_unique<Sequential>(
        std::vector<LayerPtr>{layers::Input({8, 8, 3}), layers::Conv2D(8, 3, "linear", {.use_bias = false}),
                              layers::BatchNormalization({.synchronized = synchronized}), layers::Activation("relu"),
                              layers::GlobalAveragePooling2D(), layers::Dense(10)});
    m->rematerialization = remat;
    return m;
  };
}

// synchronized=True: the replicas' statistics (and the input gradient's sums through them) are the global batch's, so
// N replicas are one device on the whole batch, moving statistics included (get_weights holds them). Uneven shards
// (128 rows on 3 replicas: 43, 43, 42) and a last batch of 2 rows on 3 replicas (2 take part) included.
TEST(MirroredStrategy, SynchronizedBatchNormOnTwoAndThreeReplicasEqualsOneDevice) {
  split_cpu();
  const int64_t n = 20 * 128 + 2;
  const Tensor x = testing::uniform({n, 784}, 1), y = testing::int_labels(n, 10, 2);
  const Trained one = train(dense_bn(true), x, y, 128, 0);  // one device: synchronized changes nothing
  ASSERT_EQ(one.weights.size(), 21u);
  ASSERT_EQ(one.weights[0].size(), 7u) << "kernel, gamma, beta, moving mean and variance, kernel, bias";
  expect_same_weights(one, train(dense_bn(false), x, y, 128, 0), "dense + bn, one device, synchronized or not", 0.0);
  for (int replicas : {2, 3})
    expect_same_weights(one, train(dense_bn(true), x, y, 128, replicas),
                        replicas == 2 ? "dense + synchronized bn, 2 replicas" : "dense + synchronized bn, 3 replicas");
  // The check can fail: each replica's own statistics differ from the global batch's.
  const double per_replica = expect_same_weights(one, train(dense_bn(false), x, y, 128, 2),
                                                 "dense + per-replica bn, 2 replicas (differs)", 1e9, SIZE_MAX, 0, 1e9);
  EXPECT_GT(per_replica, 1e-3);
}

// Over images the statistics are over batch, height and width: 36 positions per sample here.
TEST(MirroredStrategy, SynchronizedBatchNormAfterConv2DOnTwoReplicasEqualsOneDevice) {
  split_cpu();
  const int64_t n = 10 * 64 + 5;
  const Tensor x = testing::uniform({n, 8, 8, 3}, 3), y = testing::int_labels(n, 10, 4);
  const Trained one = train(conv_bn(true), x, y, 64, 0);
  expect_same_weights(one, train(conv_bn(true), x, y, 64, 2), "conv + synchronized bn, 2 replicas");
  expect_same_weights(one, train(conv_bn(true), x, y, 64, 3), "conv + synchronized bn, 3 replicas");
  // Rematerialization recomputes forward values in the backward pass, but never the statistics' collectives.
  expect_same_weights(one, train(conv_bn(true, Remat::on), x, y, 64, 2), "conv + synchronized bn, remat, 2 replicas");
}

// Micro-batches would sum each micro-batch's statistics across the replicas: a clear error, before any step.
TEST(MirroredStrategy, SynchronizedBatchNormRefusesMicroBatches) {
  split_cpu();
  const Tensor x = testing::uniform({128, 784}, 1), y = testing::int_labels(128, 10, 2);
  try {
    train(dense_bn(true), x, y, 128, 2, /*micro=*/16);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("synchronized=True) cannot run in micro-batches"), std::string::npos)
        << e.what();
  }
  // Without a strategy micro-batching is fine (synchronized has nothing to sum over).
  EXPECT_NO_THROW(train(dense_bn(true), x, y, 128, 0, 16));
}

// replicate_one_device (a test hook: what lets a one-GPU machine run NCCL's path, test_cuda_data_parallel.cpp): one
// cpu replica through the replicated path (its thread, bucketed AllReduce ops over a group of one) trains to the bits
// of the model alone, with and without micro-batches: a sum over one replica with weight 1 is the gradient itself.
TEST(MirroredStrategy, OneDeviceRunAsReplicasGivesTheBitsOfTheModelAlone) {
  const int64_t n = 10 * 64;
  const Tensor x = testing::uniform({n, 784}, 12), y = testing::int_labels(n, 10, 13);
  for (const int64_t micro : {int64_t{0}, int64_t{16}}) {
    const Trained alone = train(mlp, x, y, 64, 0, micro, Opt::adam);
    utils::set_random_seed(7);
    std::unique_ptr<Model> m = mlp();
    distribute::MirroredStrategy strategy({Device::cpu()},
                                          {.bytes_per_pack = 200 * 1024, .replicate_one_device = true});
    {
      auto scope = strategy.scope();
      m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    }
    auto rec = std::make_shared<Recorder>();
    m->fit(x, y,
           {.batch_size = 64, .epochs = 1, .verbose = 0, .callbacks = {rec}, .seed = 11, .micro_batch_size = micro});
    EXPECT_NE(m->distribute_strategy().find("1 replica in sync, run as replicas for tests"), std::string::npos)
        << m->distribute_strategy();
    EXPECT_GT(strategy.state()->collective->collectives(), 10) << "the replicated path ran, several buckets a step";
    const Trained replicated{rec->after_step, rec->loss, m->distribute_strategy(), 0, 0};
    expect_same_weights(alone, replicated, micro ? "one cpu run as replicas, micro-batches" : "one cpu run as replicas",
                        0.0, SIZE_MAX, 0, 0.0);
  }
}

TEST(MirroredStrategy, BadDeviceListsAreClearErrors) {
  split_cpu();
  EXPECT_THROW(distribute::MirroredStrategy({Device::cpu(0), Device::cpu(0)}), InvalidArgument);
  EXPECT_THROW(distribute::MirroredStrategy({Device::cpu(0), Device::cpu(7)}), Error);
  EXPECT_THROW(distribute::MirroredStrategy({Device::cuda(0)}), Unsupported);
  distribute::MirroredStrategy all;  // every cpu device
  EXPECT_EQ(all.num_replicas_in_sync(), 3);
}

}  // namespace
}  // namespace tk
