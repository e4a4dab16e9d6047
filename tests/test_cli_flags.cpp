// Every `trainkit fit` flag that changes behaviour is shown to change it, in the IDX mode (--train-images ...)
// and the --data mode, by the final weights the CLI writes with --dump-weights (exact text): the seed, the
// learning rate, each optimizer's first step against Keras (tests/fixtures/cli_first_step.txt, written by
// gen_cli_first_step.py), validation_split, steps_per_epoch, initial_epoch, validation_steps, micro-batching,
// batch_size auto, compressed TFRecords; and every option that does not apply to the chosen mode is refused instead of
// ignored.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "fixture.h"
#include "graph/op.h"
#include "trainkit/data/idx.h"
#include "trainkit/trainkit.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)
using WeightMap = std::map<std::string, tk::Tensor>;

std::string cli_fixture(const std::string& name) {
  return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/cli/" + name;
}

// The npz rows (400 x 4 floats, 2 classes) with a small MLP: the --data mode's run.
const std::string kNpz = " --model dense:8:relu,dense:2 --batch-size 32 -v 0";
std::string npz_args() { return "fit --data " + quote(cli_fixture("train.npz")) + kNpz; }
// The IDX mode: 256 training images (28x28 uint8, scaled by a Rescaling), with dropout so the seed matters twice.
std::string idx_args() {
  return "fit" + plain_data().args() + " --model dense:16:relu,dropout:0.2,dense:10 --batch-size 64 -v 0";
}

struct FitRun {
  Result result;
  std::string weights;  // the --dump-weights file's text
};

FitRun fit_dump(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  const std::string path = path_of("weights_" + std::to_string(counter++) + ".txt");
  FitRun r{run_cli(args + " --dump-weights " + quote(path), env), ""};
  EXPECT_EQ(r.result.code, 0) << args << "\n" << describe(r.result);
  r.weights = read_text(path);
  EXPECT_FALSE(r.weights.empty()) << args;
  std::remove(path.c_str());
  return r;
}

WeightMap parse_weights(const std::string& text) {
  const std::string path = path_of("parse_weights.txt");
  std::ofstream(path) << text;
  return tk::testing::load_fixture(path);
}

// Largest |a - b| over the tensors both maps hold under `prefix_b` + name.
double max_abs_diff(const WeightMap& a, const WeightMap& b, const std::string& prefix_b = "") {
  double worst = 0;
  for (const auto& [name, t] : a) {
    const tk::Tensor& u = b.at(prefix_b + name);
    EXPECT_EQ(t.shape(), u.shape()) << name;
    for (int64_t i = 0; i < t.numel(); ++i)
      worst = std::max(worst, double(std::abs(t.data<float>()[i] - u.data<float>()[i])));
  }
  return worst;
}

// The last "loss: 0.1234" / "val_loss: ..." value printed (-1 when absent).
double last_value(const std::string& out, const std::string& key) {
  const size_t at = out.rfind(" " + key + ": ");
  return at == std::string::npos ? -1.0 : std::strtod(out.c_str() + at + key.size() + 3, nullptr);
}

size_t peak_bytes(const std::string& out) {
  const size_t at = out.find("peak memory: ");
  return at == std::string::npos ? 0 : std::strtoull(out.c_str() + at + 13, nullptr, 10);
}

// ---------------------------------------------------------------- --seed

TEST(CliFlags, SameSeedIsBitIdenticalAndAnotherSeedIsNot) {
  for (const std::string& base : {idx_args(), npz_args()}) {
    const FitRun a = fit_dump(base + " --epochs 1 --seed 3"), b = fit_dump(base + " --epochs 1 --seed 3");
    const FitRun c = fit_dump(base + " --epochs 1 --seed 4");
    EXPECT_EQ(a.weights, b.weights) << base;  // %.9g text: equal text is equal bits
    EXPECT_NE(a.weights, c.weights) << base << ": --seed 4 trained exactly like --seed 3";
  }
  // The initial weights follow the seed (and, from the runs above, so does training).
  const FitRun i3 = fit_dump(idx_args() + " --epochs 0 --seed 3"), i4 = fit_dump(idx_args() + " --epochs 0 --seed 4");
  EXPECT_NE(i3.weights, i4.weights) << "the initial weights ignore --seed";
}

// ---------------------------------------------------------------- --learning-rate

TEST(CliFlags, LearningRateZeroLeavesTheWeightsUnchanged) {
  for (const std::string& base : {idx_args(), npz_args()})
    for (const char* opt : {"sgd", "adam", "adamw", "rmsprop"}) {
      const std::string args = base + " --seed 9 --optimizer " + opt;
      const FitRun start = fit_dump(args + " --epochs 0");
      EXPECT_EQ(fit_dump(args + " --epochs 2 -l 0").weights, start.weights) << args;
      EXPECT_NE(fit_dump(args + " --epochs 1 -l 0.01").weights, start.weights) << args << ": training changed nothing";
    }
}

// A model file whose optimizer follows a learning-rate schedule (Keras' Adam(learning_rate=CosineDecay(...))): the rate
// is the schedule's at every step, so --learning-rate is refused by name rather than silently ignored or overriding it.
TEST(CliFlags, LearningRateIsRefusedForAModelFileWithASchedule) {
  const std::string model = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/optimizers/adam_cosine.keras";
  const std::string args = "fit --data " + quote(cli_fixture("train.npz")) + " --model " + quote(model) + " -v 0";
  expect_user_error(run_cli(args + " --learning-rate 0.1"), {"--learning-rate", "CosineDecay", "adam_cosine.keras"});
}

// ---------------------------------------------------------------- --optimizer: Keras' first step

class CliOptimizerFirstStep : public ::testing::TestWithParam<const char*> {};

// One step over all 400 rows from trainkit's initial weights: the loss Keras reports and the weights after
// its update. The update is ~1e-2 (lr 0.01); trainkit's differs from Keras' by float32 summation order only.
TEST_P(CliOptimizerFirstStep, LossAndUpdateMatchKeras) {
  const std::string name = GetParam();
  const WeightMap f = tk::testing::load_fixture(tk::testing::fixture_path("cli_first_step.txt"));
  const std::string base = "fit --data " + quote(cli_fixture("train.npz")) +
                           " --model dense:8:relu,dense:2 --seed 5 --batch-size 400 --no-summary --optimizer " + name;
  WeightMap init, keras_after;
  for (const auto& [key, t] : f) {
    if (key.rfind("init/", 0) == 0) init.emplace(key.substr(5), t);
    if (key.rfind(name + "/", 0) == 0 && key != name + "/loss") keras_after.emplace(key.substr(name.size() + 1), t);
  }
  ASSERT_EQ(init.size(), 4u);
  ASSERT_EQ(keras_after.size(), 4u);
  ASSERT_EQ(max_abs_diff(parse_weights(fit_dump(base + " --epochs 0 -v 0").weights), init), 0.0)
      << "trainkit's initial weights changed: regenerate tests/fixtures/cli_first_step.txt (gen_cli_first_step.py)";

  // sgd without -l: Keras' SGD default learning rate, 0.01, as the fixture's other optimizers are given.
  const std::string lr = name == "sgd" ? "" : " -l 0.01";
  const FitRun step = fit_dump(base + lr + " --epochs 1 -v 2");
  EXPECT_NEAR(last_value(step.result.out, "loss"), f.at(name + "/loss").data<float>()[0], 5.1e-5)
      << step.result.out;  // printed with 4 decimals
  const WeightMap after = parse_weights(step.weights);
  double worst = 0, update = 0;  // |trainkit - Keras| after the step, and the size of Keras' update
  for (const auto& [w, k] : keras_after) {
    const tk::Tensor& t = after.at(w);
    const tk::Tensor& w0 = init.at(w);
    for (int64_t i = 0; i < k.numel(); ++i) {
      worst = std::max(worst, double(std::abs(t.data<float>()[i] - k.data<float>()[i])));
      update = std::max(update, double(std::abs(k.data<float>()[i] - w0.data<float>()[i])));
    }
  }
  std::printf("[ cli step ] %-8s update %.3e, trainkit vs Keras %.3e\n", name.c_str(), update, worst);
  EXPECT_GT(update, 1e-3) << name;
  // Adam's first step is ~lr * sign(g) and is sensitive where g ~ epsilon: looser than SGD's linear step.
  EXPECT_LE(worst, name == "sgd" ? 1e-7 : 1e-6) << name << ": the first update differs from Keras'";
}

INSTANTIATE_TEST_SUITE_P(Keras, CliOptimizerFirstStep, ::testing::Values("sgd", "adam", "adamw", "rmsprop"));

// The library's defaults (what `--optimizer NAME` gets, and the *Options structs) are Keras 3's get_config().
TEST(CliFlags, OptimizerDefaultsAreKerasGetConfig) {
  const WeightMap f = tk::testing::load_fixture(tk::testing::fixture_path("cli_first_step.txt"));
  int checked = 0;
  for (const char* name : {"sgd", "adam", "adamw", "rmsprop"}) {
    const tk::OptimizerPtr o = tk::optimizers::get(name);
    const auto& c = o->config();
    const std::map<std::string, double> ours{
        {"learning_rate", c.learning_rate},
        {"weight_decay", c.weight_decay},
        {"clipnorm", c.clipnorm},
        {"global_clipnorm", c.global_clipnorm},
        {"clipvalue", c.clipvalue},
        {"momentum", c.momentum},
        {"nesterov", c.nesterov ? 1 : 0},
        {"beta_1", c.beta_1},
        {"beta_2", c.beta_2},
        {"epsilon", c.epsilon},
        {"amsgrad", 0},  // trainkit has no AMSGrad: Keras' default (off) is the only variant
        {"rho", c.rho},
        {"centered", c.centered ? 1 : 0}};
    const std::string prefix = std::string("defaults/") + name + "/";
    for (const auto& [key, t] : f) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string field = key.substr(prefix.size());
      ASSERT_TRUE(ours.count(field)) << "Keras' " << name << " has " << field << ", trainkit's config has not";
      EXPECT_EQ(static_cast<float>(ours.at(field)), t.data<float>()[0]) << name << "." << field;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30);
  EXPECT_EQ(tk::optimizers::SGDOptions{}.learning_rate, f.at("defaults/sgd/learning_rate").data<float>()[0]);
  EXPECT_EQ(tk::optimizers::AdamWOptions{}.weight_decay, f.at("defaults/adamw/weight_decay").data<float>()[0]);
  EXPECT_EQ(tk::optimizers::RMSpropOptions{}.epsilon, f.at("defaults/rmsprop/epsilon").data<float>()[0]);
}

// ---------------------------------------------------------------- --validation-split

// Keras holds out the last 25% (before shuffling): 256 -> 192 training rows, 6 steps of 32; the val_ metrics
// printed equal evaluating the final weights on rows [192, 256).
TEST(CliFlags, ValidationSplitHoldsOutTheTailAndReportsItsMetrics) {
  const FitRun r = fit_dump("fit" + plain_data().args() +
                            " --model dense:10 --epochs 2 --batch-size 32 --validation-split 0.25 -v 2 --no-summary");
  EXPECT_CONTAINS(r.result.out, "6/6 - ");
  EXPECT_FALSE(contains(r.result.out, "8/8 - ")) << r.result.out;
  const double val_loss = last_value(r.result.out, "val_loss"), val_acc = last_value(r.result.out, "val_accuracy");
  ASSERT_GE(val_loss, 0.0) << r.result.out;

  auto [x, y] = tk::data::load_idx_pair(plain_data().train_images, plain_data().train_labels);
  tk::clear_session();
  tk::Sequential model({tk::layers::Input({28, 28}), tk::layers::Rescaling(1.0f / 255.0f), tk::layers::Flatten(),
                        tk::layers::Dense(10)});
  model.compile(tk::optimizers::get("adam"), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                {"accuracy"});
  const WeightMap w = parse_weights(r.weights);
  model.set_weights({w.at("dense/kernel"), w.at("dense/bias")});
  const tk::Logs tail = model.evaluate(x.slice_rows(192, 256), y.slice_rows(192, 256), {.batch_size = 64});
  EXPECT_NEAR(val_loss, tail.get("loss"), 5.1e-5) << r.result.out;
  EXPECT_NEAR(val_acc, tail.get("accuracy"), 5.1e-5) << r.result.out;
  const tk::Logs head = model.evaluate(x.slice_rows(0, 64), y.slice_rows(0, 64), {.batch_size = 64});
  EXPECT_NE(std::round(head.get("loss") * 1e4), std::round(tail.get("loss") * 1e4)) << "the test cannot tell";
}

// ---------------------------------------------------------------- --steps-per-epoch, --initial-epoch,
// --validation-steps

// Keras' steps_per_epoch: that many batches per epoch (3 of the 8 a pass of 256 rows in batches of 32 holds); as many
// as a pass holds is the same training as none given, bit for bit. In both modes.
TEST(CliFlags, StepsPerEpochSetsTheBatchesOfAnEpoch) {
  const std::string base =
      "fit" + plain_data().args() + " --model dense:10 --epochs 2 --batch-size 32 -v 2 --no-summary";
  const FitRun three = fit_dump(base + " --steps-per-epoch 3"), all = fit_dump(base),
               eight = fit_dump(base + " --steps-per-epoch 8");
  EXPECT_CONTAINS(three.result.out, "3/3 - ");
  EXPECT_FALSE(contains(three.result.out, "8/8 - ")) << three.result.out;
  EXPECT_CONTAINS(all.result.out, "8/8 - ");
  EXPECT_EQ(eight.weights, all.weights);
  EXPECT_NE(three.weights, all.weights);
  const FitRun npz = fit_dump("fit --data " + quote(cli_fixture("train.npz")) +
                              " --model dense:8:relu,dense:2 --batch-size 32 -v 2 --no-summary --steps-per-epoch 5");
  EXPECT_CONTAINS(npz.result.out, "5/5 - ");
  expect_user_error(run_cli(idx_args() + " --steps-per-epoch -1"), {"--steps-per-epoch", "-1"});
}

// Keras' initial_epoch: --epochs 3 --initial-epoch 2 runs the third epoch only, numbered 3/3, and the History holds
// that epoch alone (index 2).
TEST(CliFlags, InitialEpochStartsAtThatEpoch) {
  const std::string json = path_of("initial_epoch_history.json");
  const Result r = run_cli("fit" + plain_data().args() + " --model dense:10 --epochs 3 --initial-epoch 2 -v 2 " +
                           "--no-summary --history-json " + quote(json));
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "Epoch 3/3\n");
  EXPECT_FALSE(contains(r.out, "Epoch 1/3")) << r.out;
  EXPECT_FALSE(contains(r.out, "Epoch 2/3")) << r.out;
  EXPECT_CONTAINS(read_text(json), "{\"epoch\":[2],");
  expect_user_error(run_cli(idx_args() + " --epochs 2 --initial-epoch 3"), {"--initial-epoch", "3", "--epochs 2"});
}

// Keras' validation_steps: the validation metrics of each epoch are those of its first N batches — here batch 32 of
// the 64 held-out rows: rows 192 to 223, evaluated with the trained weights the CLI dumps.
TEST(CliFlags, ValidationStepsEvaluatesThatManyBatches) {
  const FitRun r =
      fit_dump("fit" + plain_data().args() + " --model dense:10 --epochs 1 --batch-size 32 --validation-split 0.25 " +
               "--validation-steps 1 -v 2 --no-summary");
  const double val_loss = last_value(r.result.out, "val_loss");
  ASSERT_GE(val_loss, 0.0) << r.result.out;
  auto [x, y] = tk::data::load_idx_pair(plain_data().train_images, plain_data().train_labels);
  tk::clear_session();
  tk::Sequential model({tk::layers::Input({28, 28}), tk::layers::Rescaling(1.0f / 255.0f), tk::layers::Flatten(),
                        tk::layers::Dense(10)});
  model.compile(tk::optimizers::get("adam"), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                {"accuracy"});
  const WeightMap w = parse_weights(r.weights);
  model.set_weights({w.at("dense/kernel"), w.at("dense/bias")});
  const tk::Logs first = model.evaluate(x.slice_rows(192, 224), y.slice_rows(192, 224), {.batch_size = 32});
  const tk::Logs whole = model.evaluate(x.slice_rows(192, 256), y.slice_rows(192, 256), {.batch_size = 32});
  EXPECT_NEAR(val_loss, first.get("loss"), 5.1e-5) << r.result.out;
  EXPECT_NE(std::round(first.get("loss") * 1e4), std::round(whole.get("loss") * 1e4)) << "the test cannot tell";
  expect_user_error(run_cli(idx_args() + " --validation-steps 2"), {"--validation-steps", "--validation-split"});
}

// ---------------------------------------------------------------- --micro-batch-size

// N: the same update as the whole batch (up to summation order) in less memory — a flag that was ignored
// would leave the peak where it was.
TEST(CliFlags, MicroBatchSizeSplitsTheBatchInBothModes) {
  const std::vector<std::string> bases{
      "fit" + plain_data().args() + " --model dense:64:relu,dense:64:relu,dense:10 --batch-size 256",
      "fit --data " + quote(cli_fixture("train.npz")) + " --model dense:512:relu,dense:2 --batch-size 200"};
  for (const std::string& b : bases) {
    const std::string base = b + " --optimizer sgd -l 0.1 --epochs 1 --seed 2 -v 0";
    const FitRun whole = fit_dump(base), split = fit_dump(base + " --micro-batch-size 16");
    const size_t whole_peak = peak_bytes(whole.result.out), split_peak = peak_bytes(split.result.out);
    std::printf("[ micro ] peak %zu bytes whole, %zu in micro-batches of 16\n", whole_peak, split_peak);
    EXPECT_GT(split_peak, 0u);
    EXPECT_LT(split_peak, whole_peak - whole_peak / 10) << b << ": micro-batches of 16 saved less than 10%";
    EXPECT_LE(max_abs_diff(parse_weights(split.weights), parse_weights(whole.weights)), 1e-5) << b;
    EXPECT_NE(split.weights,
              fit_dump(b + " --optimizer sgd -l 0.2 --epochs 1 --seed 2 -v 0 --micro-batch-size 16").weights);
  }
}

// auto: under a budget where a batch of 256 does not fit whole, the IDX mode splits it too (the --data mode's
// auto is tested in CliData.MicroBatchSizeAutoIsResolvedForData) and stays within the budget.
TEST(CliFlags, MicroBatchSizeAutoSplitsUnderABudgetWithArrays) {
  const FitRun r = fit_dump("fit" + plain_data().args() +
                                " --model dense:1024:relu,dense:10 --batch-size 256 --micro-batch-size auto"
                                " --epochs 1 -v 2 --no-summary",
                            "TK_MEMORY_LIMIT=20MiB");
  long long micro = -1, batch = -1;
  const size_t at = r.result.out.find("micro_batch_size auto: ");
  ASSERT_NE(at, std::string::npos) << r.result.out;
  ASSERT_EQ(std::sscanf(r.result.out.c_str() + at, "micro_batch_size auto: %lld per step of %lld", &micro, &batch), 2);
  EXPECT_EQ(batch, 256);
  EXPECT_GT(micro, 0);
  EXPECT_LT(micro, 256);
  EXPECT_LE(peak_bytes(r.result.out), size_t{20} << 20);
}

// ---------------------------------------------------------------- --batch-size auto

// Under a budget where a batch of all 256 samples does not fit, auto picks a smaller one that does: it trains
// with it (steps per epoch follow), its plan is within what it reports available, and the peak is in budget.
TEST(CliFlags, BatchSizeAutoPicksABatchThatFitsTheBudget) {
  const std::string base =
      "fit" + plain_data().args() + " --model dense:256:relu,dense:10 --epochs 1 -v 2 --no-summary";
  const std::string env = "TK_MEMORY_LIMIT=5MiB";
  const Result whole = run_cli(base + " --batch-size 256", env);
  EXPECT_EQ(whole.code, 1) << "the test needs a budget a batch of 256 does not fit\n" << describe(whole);
  const Result fit = run_cli(base + " --batch-size auto", env);
  ASSERT_EQ(fit.code, 0) << describe(fit);
  long long batch = 0;
  double plan = 0, available = 0;
  char plan_unit[8] = {}, available_unit[8] = {};
  const size_t at = fit.out.find("batch_size auto: ");
  ASSERT_NE(at, std::string::npos) << fit.out;
  ASSERT_EQ(std::sscanf(fit.out.c_str() + at, "batch_size auto: %lld (plan %lf %7s of %lf %7s available)", &batch,
                        &plan, plan_unit, &available, available_unit),
            5)
      << fit.out;
  EXPECT_GT(batch, 0);
  EXPECT_LT(batch, 256);
  EXPECT_EQ(std::string(plan_unit), "MiB");
  EXPECT_EQ(std::string(available_unit), "MiB");
  EXPECT_LE(plan, available);
  const long long steps = (256 + batch - 1) / batch;
  EXPECT_CONTAINS(fit.out, "\n" + std::to_string(steps) + "/" + std::to_string(steps) + " - ");
  EXPECT_LE(peak_bytes(fit.out), size_t{5} << 20);
}

// The OOM report's first remedy is a number: "a batch of N fits this budget now". Parsed and re-run with
// --batch-size N under the same budget, it must train. (Its other suggestion, micro_batch_size=N keeping the
// batch, does not fit here: it leaves out the gradient accumulators micro-batching adds — reported, not
// asserted.)
TEST(CliFlags, TheOomReportsBatchThatFitsDoesFit) {
  const std::string base = "fit" + plain_data().args() + " --model dense:512:relu,dense:10 --epochs 1 -v 0";
  const std::string env = "TK_MEMORY_LIMIT=8MiB";
  const Result oom = run_cli(base + " --batch-size 256", env);
  ASSERT_EQ(oom.code, 1) << describe(oom);
  const size_t at = oom.err.find("a batch of ");
  ASSERT_NE(at, std::string::npos) << describe(oom);
  const long long fits = std::strtoll(oom.err.c_str() + at + 11, nullptr, 10);
  ASSERT_GT(fits, 0) << oom.err;
  ASSERT_LT(fits, 256) << oom.err;
  const Result rerun = run_cli(base + " --batch-size " + std::to_string(fits), env);
  EXPECT_EQ(rerun.code, 0) << "the report said a batch of " << fits << " fits\n" << describe(rerun);
  EXPECT_CONTAINS(rerun.out, "test_accuracy: ");
  EXPECT_LE(peak_bytes(rerun.out), size_t{8} << 20);
}

// Its second remedy, mixed precision, is a number too: what the step would take under mixed_bfloat16 — the
// total `trainkit plan --dtype-policy mixed_bfloat16` prints for the same model and batch.
TEST(CliFlags, TheOomReportsMixedPrecisionNumberIsTheStepUnderMixedBfloat16) {
  const Result oom =
      run_cli("fit" + plain_data().args() + " --model cnn --epochs 1 -v 0 --batch-size 256", "TK_MEMORY_LIMIT=110MiB");
  ASSERT_EQ(oom.code, 1) << describe(oom);
  const std::string needle = "mixed precision: under mixed_bfloat16 this step would take ";
  const size_t at = oom.err.find(needle);
  ASSERT_NE(at, std::string::npos) << describe(oom);
  EXPECT_CONTAINS(oom.err, "--dtype-policy mixed_bfloat16");
  const Result plan16 = run_cli("plan --model cnn --batch-size 256 --dtype-policy mixed_bfloat16");
  ASSERT_EQ(plan16.code, 0) << describe(plan16);
  const size_t t = plan16.out.find("total (peak)");
  ASSERT_NE(t, std::string::npos) << plan16.out;
  std::istringstream total(plan16.out.substr(t + 12));
  std::string number, unit;
  total >> number >> unit;  // "93.92 MiB"
  EXPECT_EQ(oom.err.substr(at + needle.size(), number.size() + 1 + unit.size()), number + " " + unit) << oom.err;
}

// ---------------------------------------------------------------- options that do not apply

TEST(CliFlags, OptionsThatDoNotApplyToTheModeAreRefused) {
  struct Case {
    std::string args;
    std::vector<std::string> needles;
  };
  const std::string npz = " --data " + quote(cli_fixture("train.npz"));
  const std::vector<Case> cases{
      // the built-in Fashion-MNIST (no data options at all) and the explicit IDX files
      {" --x image", {"--x", "applies to --data only", "Fashion-MNIST"}},
      {" --y label", {"--y", "applies to --data only"}},
      {" --format csv", {"--format", "applies to --data only"}},
      {" --format auto", {"--format", "applies to --data only"}},
      {" --validation-y labels.idx", {"--validation-y", "applies to --data only"}},
      {" --shuffle-buffer 100", {"--shuffle-buffer", "applies to --data only"}},
      {" --shuffle-buffer -5", {"--shuffle-buffer", "applies to --data only"}},
      {plain_data().args() + " --shuffle-buffer 100", {"--shuffle-buffer", "--train-images", "IDX"}},
      {plain_data().args() + " --x a", {"--x", "applies to --data only"}},
      // --data
      {npz + " --shuffle-buffer -1", {"--shuffle-buffer must be positive, got -1"}},
      {npz + " --shuffle-buffer 0", {"--shuffle-buffer must be positive, got 0"}},
      {npz + " --data-dir somewhere", {"--data-dir does not apply to --data"}},
      {npz + " --validation-y y.npy", {"--validation-y y.npy needs --validation-data"}},
      {" --data " + quote(plain_data().train_images) + " --format idx --y " + quote(plain_data().train_labels) +
           " --x pixels",
       {"--x does not apply to idx"}},
      {npz + plain_data().args(), {"--data replaces"}},
  };
  for (const Case& c : cases) {
    const Result r = run_cli("fit --epochs 0 -v 0" + c.args);
    SCOPED_TRACE(c.args);
    expect_user_error(r, c.needles);
    EXPECT_FALSE(contains(r.out, "test_accuracy")) << "refused before loading the data";
  }
}

// ---------------------------------------------------------------- compressed TFRecord files

// TensorFlow's TFRecordOptions("ZLIB") and ("GZIP") files are told by their first bytes, whatever their name:
// each trains exactly like the plain file.
TEST(CliFlags, CompressedTfrecordsTrainLikeThePlainFile) {
  const Bytes plain = read_bytes(cli_fixture("train.tfrecord"));
  ASSERT_GT(plain.size(), 1000u);
  uLongf zlen = compressBound(static_cast<uLong>(plain.size()));
  Bytes z(zlen);
  ASSERT_EQ(compress2(z.data(), &zlen, plain.data(), static_cast<uLong>(plain.size()), 6), Z_OK);
  z.resize(zlen);
  const std::string zlib_named = write_file("zlib.tfrecord", z), zlib_unnamed = write_file("zlib_records", z);
  const std::string gz_unnamed = write_gz("gzip_records", plain);
  const std::string common = " --x x:4 --y y --model dense:8:relu,dense:2 --epochs 2 --batch-size 32 --seed 1 -v 0";
  const FitRun want = fit_dump("fit --data " + quote(cli_fixture("train.tfrecord")) + common);
  EXPECT_EQ(fit_dump("fit --data " + quote(zlib_named) + common).weights, want.weights);
  EXPECT_EQ(fit_dump("fit --format tfrecord --data " + quote(zlib_unnamed) + common).weights, want.weights);
  EXPECT_EQ(fit_dump("fit --format tfrecord --data " + quote(gz_unnamed) + common).weights, want.weights);
  // TensorFlow's own ZLIB file (raw records, not Examples): recognised as ZLIB, so the error is about the
  // records' contents, not a bad length or CRC at offset 0.
  const Result r = run_cli(
      "fit --data " + quote(std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/tfrecord/plain.tfrecord.zlib") + common);
  ASSERT_EQ(r.error_lines.size(), 1u) << describe(r);
  EXPECT_FALSE(contains(r.error_lines[0], "CRC")) << r.error_lines[0];
}

// --class-weight (Keras' class_weight, issue 33): weights of 1 train as no weights (up to the weighted program's
// rounding); another weight trains otherwise; a bad entry or a class outside the output is one clear error.
TEST(CliFlags, ClassWeightWeightsTheLoss) {
  const std::string base =
      "fit" + plain_data().args() + " --model dense:10 --epochs 1 --batch-size 64 -v 0 --no-summary";
  const WeightMap plain = parse_weights(fit_dump(base).weights);
  const WeightMap ones = parse_weights(fit_dump(base + " --class-weight 0:1,9:1").weights);
  const WeightMap weighted = parse_weights(fit_dump(base + " --class-weight 0:1,3:6,9:0.25").weights);
  EXPECT_LT(max_abs_diff(plain, ones), 1e-5);
  EXPECT_GT(max_abs_diff(plain, weighted), 1e-3);
  expect_user_error(run_cli(base + " --class-weight 0=1"), {"--class-weight", "'0=1' is not CLASS:WEIGHT"});
  expect_user_error(run_cli(base + " --class-weight 0:1,10:2"), {"class_weight names class 10", "10 classes"});
}

}  // namespace
