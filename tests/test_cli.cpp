// The `trainkit` command line, run as a separate process (TK_CLI_PATH) on small IDX files written here.
// Checks exit codes, what goes to stdout and stderr, and that every user mistake is one clear error line.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "runtime/cuda_device.h"
#include "trainkit/data/npy.h"
#include "trainkit/trainkit.h"

namespace {

using namespace tk_cli_test;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------- help

TEST(CliHelp, TopLevelHelp) {
  Result r = run_cli("--help");
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "fit");
  EXPECT_CONTAINS(r.out, "Usage");
}

TEST(CliHelp, FitHelpListsOptions) {
  Result r = run_cli("fit --help");
  EXPECT_EQ(r.code, 0) << describe(r);
  for (const char* opt : {"--epochs", "--batch-size", "--model", "--optimizer", "--learning-rate", "--seed",
                          "--train-images", "--train-labels", "--test-images", "--test-labels", "--verbose"})
    EXPECT_CONTAINS(r.out, opt);
  EXPECT_TRUE(r.err.empty()) << describe(r);
}

TEST(CliHelp, VersionAndMissingSubcommand) {
  Result v = run_cli("--version");
  EXPECT_EQ(v.code, 0) << describe(v);
  EXPECT_CONTAINS(v.out, "0.1.0");
  expect_usage_error(run_cli(""), {"missing command", "fit, plan, devices, smi"}, "trainkit");
  expect_usage_error(run_cli("fitt --epochs 1"), {"unknown command 'fitt'", "fit, plan, devices, smi"}, "trainkit");
}

// ---------------------------------------------------------------- command-line mistakes: exit 2

TEST(CliUsage, UnknownFlag) {
  expect_usage_error(run_cli("fit --epochz 3"), {"unrecognized arguments: --epochz 3", "did you mean --epochs?"},
                     "trainkit fit");
  expect_usage_error(run_cli("plan --batch 8"), {"--batch 8"}, "trainkit plan");
  expect_usage_error(run_cli("devices --all"), {"--all"}, "trainkit devices");
  expect_usage_error(run_cli("fit stray"), {"unrecognized arguments: stray"}, "trainkit fit");
}

TEST(CliUsage, MissingValue) {
  expect_usage_error(run_cli("fit --epochs"), {"--epochs: expected a value (an integer)"}, "trainkit fit");
  expect_usage_error(run_cli("fit -v 0 --model"), {"--model: expected a value"}, "trainkit fit");
  expect_usage_error(run_cli("smi --watch"), {"--watch: expected a value (a number)"}, "trainkit smi");
}

TEST(CliUsage, NotANumber) {
  expect_usage_error(run_cli("fit --epochs abc"), {"--epochs: 'abc' is not an integer"}, "trainkit fit");
  expect_usage_error(run_cli("fit -e 1.5"), {"--epochs: '1.5' is not an integer"}, "trainkit fit");
  expect_usage_error(run_cli("fit --learning-rate fast"), {"--learning-rate: 'fast' is not a number"}, "trainkit fit");
  expect_usage_error(run_cli("plan --batch-size 64k"), {"--batch-size: '64k' is not an integer"}, "trainkit plan");
  expect_usage_error(run_cli("plan --input-shape 28 x"), {"--input-shape", "integer", "x"}, "trainkit plan");
}

TEST(CliUsage, UnknownOptimizerListsTheValidNames) {
  for (const char* cmd : {"fit", "plan"})
    expect_usage_error(run_cli(std::string(cmd) + " --optimizer adamx"),
                       {"--optimizer", "'adamx'", "sgd, adam, adamw, rmsprop"}, std::string("trainkit ") + cmd);
  expect_usage_error(run_cli("fit -o ftrl"), {"'ftrl'", "sgd, adam, adamw, rmsprop", "nadam", "adafactor"},
                     "trainkit fit");
}

TEST(CliUsage, UnknownFormatListsTheValidNames) {
  expect_usage_error(run_cli("fit --data x.npz --format parquet"), {"--format", "'parquet'", "csv", "tfrecord"},
                     "trainkit fit");
}

TEST(CliUsage, HelpStillExitsZero) {
  for (const char* args :
       {"--help", "fit --help", "plan --help", "devices --help", "smi -h", "fit --epochs 3 --help"}) {
    Result r = run_cli(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << describe(r);
    EXPECT_CONTAINS(r.out, "Usage");
    EXPECT_TRUE(r.err.empty()) << args << "\n" << describe(r);
  }
}

// ---------------------------------------------------------------- successful runs

TEST(CliFit, TinyRunSucceeds) {
  Result r = run_cli("fit" + plain_data().args() + " --epochs 1 --batch-size 32 -v 0");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "test_loss:");
  EXPECT_CONTAINS(r.out, "test_accuracy:");
  const double acc = test_accuracy(r.out);
  EXPECT_GE(acc, 0.0) << r.out;
  EXPECT_LE(acc, 1.0) << r.out;
  EXPECT_FALSE(contains(r.out, "Total params")) << "-v 0 prints no summary:\n" << r.out;
  EXPECT_FALSE(contains(r.out, "Epoch 1/1")) << "-v 0 prints no progress:\n" << r.out;
  EXPECT_TRUE(r.err.empty()) << describe(r);
}

TEST(CliFit, VerboseRunPrintsSummaryAndEpochs) {
  Result r = run_cli("fit" + plain_data().args() + " --epochs 2 --batch-size 64 -v 2");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "Total params: 235,146");  // the default 784-256-128-10 MLP
  EXPECT_CONTAINS(r.out, "Epoch 1/2");
  EXPECT_CONTAINS(r.out, "Epoch 2/2");
  EXPECT_CONTAINS(r.out, "loss:");
  EXPECT_CONTAINS(r.out, "test_accuracy:");
  EXPECT_FALSE(contains(r.out, "\r")) << "no carriage returns when stdout is not a terminal";
  // --no-summary drops the summary but keeps the progress lines.
  Result q = run_cli("fit" + plain_data().args() + " --epochs 1 -v 2 --no-summary");
  ASSERT_EQ(q.code, 0) << describe(q);
  EXPECT_FALSE(contains(q.out, "Total params")) << q.out;
  EXPECT_CONTAINS(q.out, "Epoch 1/1");
}

TEST(CliFit, GzippedFilesCustomModelLearns) {
  Result r = run_cli("fit" + gz_data().args() +
                     " --model dense:32:relu,dropout:0.1,dense:10 --optimizer adam -l 0.01 --epochs 8 --batch-size 32"
                     " --seed 7 -v 0");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_GE(test_accuracy(r.out), 0.9) << r.out;  // the classes are trivially separable
}

TEST(CliFit, SameSeedSameResult) {
  const std::string args =
      "fit" + plain_data().args() + " --model dense:16:relu,dense:10 --epochs 2 --batch-size 32 --seed 3 -v 0";
  Result a = run_cli(args), b = run_cli(args);
  ASSERT_EQ(a.code, 0) << describe(a);
  ASSERT_EQ(b.code, 0) << describe(b);
  EXPECT_EQ(a.out, b.out);
}

// --replicas 2: data parallel over two logical cpu devices, each under half of the budget (MirroredStrategy), trains
// the model one device trains on the same global batches: the same losses up to the summation order.
TEST(CliFit, ReplicasTrainWhatOneDeviceTrains) {
  // A budget, not the machine: --replicas splits the device's budget into leases per replica, and a run that leased
  // all of the machine's memory made a concurrent test (whose HDF5 helper leases beside its parent) wait for it
  // while it waited for that test's memory (ctest -j2).
  const std::string args =
      "fit" + plain_data().args() +
      " --model dense:16:relu,dense:10 --epochs 2 --batch-size 32 --seed 3 -v 2 --memory-limit 2GiB";
  Result one = run_cli(args), two = run_cli(args + " --replicas 2");
  ASSERT_EQ(one.code, 0) << describe(one);
  ASSERT_EQ(two.code, 0) << describe(two);
  EXPECT_CONTAINS(two.out + two.err, "logical device 1 of 2");
  EXPECT_CONTAINS(two.out, "all-reduce:");  // the epoch line shows the replicas' all-reduce time
  EXPECT_FALSE(contains(one.out, "all-reduce:")) << one.out;
  auto test_loss = [](const std::string& out) {
    const size_t at = out.find("test_loss: ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 11));
  };
  ASSERT_GE(test_loss(one.out), 0.0) << one.out;
  EXPECT_NEAR(test_loss(two.out), test_loss(one.out), 2e-4) << one.out << "\n---\n" << two.out;
  EXPECT_EQ(test_accuracy(two.out), test_accuracy(one.out)) << one.out << "\n---\n" << two.out;
  // A count below 1 is refused, naming the flag.
  Result zero = run_cli("fit" + plain_data().args() + " --replicas 0");
  EXPECT_NE(zero.code, 0);
  EXPECT_CONTAINS(zero.err, "--replicas");
}

// A convolutional spec: (28, 28) images get a channel axis instead of being flattened, and batchnorm:sync reaches the
// layer (its saved config says synchronized); two replicas reach one device's test loss. (The printed loss has 4
// decimals and this data is small, so per-replica statistics would pass that too:
// MirroredStrategy.SynchronizedBatchNorm* tell them apart, per weight.)
TEST(CliFit, ConvolutionalSpecWithSynchronizedBatchNormRunsOnReplicas) {
  const std::string args = "fit" + plain_data().args() +
                           " --model conv2d:4:3,batchnorm:sync,activation:relu,maxpool:2,flatten,dense:10 --epochs 1"
                           " --batch-size 32 --seed 3 -v 2 --memory-limit 2GiB";
  const std::string saved = (cli_dir() / "conv_sync_bn.keras").string();
  Result one = run_cli(args), two = run_cli(args + " --replicas 2 --save " + saved);
  ASSERT_EQ(one.code, 0) << describe(one);
  ASSERT_EQ(two.code, 0) << describe(two);
  auto test_loss = [](const std::string& out) {
    const size_t at = out.find("test_loss: ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 11));
  };
  ASSERT_GE(test_loss(one.out), 0.0) << one.out;
  EXPECT_NEAR(test_loss(two.out), test_loss(one.out), 1e-3) << one.out << "\n---\n" << two.out;
  std::ifstream file(saved, std::ios::binary);
  const std::string archive((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_CONTAINS(archive, "\"synchronized\":true");  // config.json is stored uncompressed in the .keras zip
  Result summary = run_cli("plan --model conv2d:4:3:relu:same,avgpool,globalmaxpool,dense:10");
  EXPECT_EQ(summary.code, 0) << describe(summary);
  EXPECT_CONTAINS(summary.out, "reshape");  // the (28, 28) input gets its channel axis
  EXPECT_CONTAINS(summary.out, "global_max_pooling2d");
}

// The convolution family's spec items (issue 31): a depthwise first layer still gets the channel axis.
TEST(CliPlan, DepthwiseAndSeparableSpecItems) {
  Result r = run_cli("plan --model dwconv2d:3:relu:same:2,sepconv2d:8:3:relu,globalavgpool,dense:10");
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "reshape");
  EXPECT_CONTAINS(r.out, "depthwise_conv2d");
  EXPECT_CONTAINS(r.out, "separable_conv2d");
  Result bad = run_cli("plan --model dwconv2d:3:relu:same:0,dense:10");
  EXPECT_NE(bad.code, 0);
  EXPECT_CONTAINS(bad.err, "positive depth multiplier");
}

// The augmentation and noise spec items: an image model starting with a flip gets the channel axis and trains.
TEST(CliPlan, AugmentationSpecItems) {
  Result r = run_cli(
      "plan --model random_flip:horizontal,random_contrast:0.2,center_crop:24:24,conv2d:4:3:relu,"
      "gaussian_noise:0.1,globalavgpool,gaussian_dropout:0.2,dense:10");
  EXPECT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "reshape");
  EXPECT_CONTAINS(r.out, "random_flip");
  EXPECT_CONTAINS(r.out, "center_crop");
  EXPECT_CONTAINS(r.out, "gaussian_dropout");
  Result bad = run_cli("plan --model random_flip:diagonal,dense:10");
  EXPECT_NE(bad.code, 0);
  EXPECT_CONTAINS(bad.err, "horizontal_and_vertical");
  Result noise = run_cli("plan --model dense:4,gaussian_noise,dense:10");
  EXPECT_NE(noise.code, 0);
  EXPECT_CONTAINS(noise.err, "gaussian_noise needs a stddev");
  Result resized = run_cli("plan --model resizing:32:32,conv2d:4:3:relu,resizing:16:16:nearest,flatten,dense:10");
  EXPECT_EQ(resized.code, 0) << describe(resized);
  EXPECT_CONTAINS(resized.out, "resizing");
  Result affine = run_cli(
      "plan --model random_translation:0.1:0.2,random_rotation:0.05,random_zoom:0.1:0.2,conv2d:4:3,"
      "flatten,dense:10");
  EXPECT_EQ(affine.code, 0) << describe(affine);
  EXPECT_CONTAINS(affine.out, "random_zoom");
  Result bad_zoom = run_cli("plan --model random_zoom:big,dense:10");
  EXPECT_NE(bad_zoom.code, 0);
  EXPECT_CONTAINS(bad_zoom.err, "random_zoom takes numbers");
  Result cubic = run_cli("plan --model resizing:32:32:bicubic,dense:10");
  EXPECT_NE(cubic.code, 0);
  EXPECT_CONTAINS(cubic.err, "bicubic");
}

// A model file is planned with its own compiled optimizer and loss (what `trainkit fit --model f.keras` trains with),
// not the default adam: SGD with momentum holds one slot per weight, Adam two; --optimizer replaces the file's in the
// plan ("what if"). The file's weights are never read for it.
TEST(CliPlan, AModelFileIsPlannedWithItsOwnCompiledOptimizer) {
  auto file_with = [](const std::string& name, tk::OptimizerPtr optimizer) {
    tk::Sequential m({tk::layers::Input({784}), tk::layers::Dense(64, "relu"), tk::layers::Dense(10)});
    m.compile(std::move(optimizer), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
    const std::string path = path_of(name);
    m.save(path);
    return path;
  };
  auto optimizer_line = [](const Result& r) {
    EXPECT_EQ(r.code, 0) << describe(r);
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
      if (line.find("  optimizer state ") == 0) return line;
    return std::string("(no optimizer state line)");
  };
  // The same layers from a spec, planned with a named optimizer: what each file's line must equal.
  auto spec_line = [&](const std::string& optimizer) {
    return optimizer_line(
        run_cli("plan --model dense:64:relu,dense:10 --input-shape 784 --batch-size 32 --optimizer " + optimizer));
  };
  // "sgd" is Keras' SGD(): momentum 0, no slot; RMSprop(): one slot (the velocity); Adam: two.
  const std::string sgd = file_with("plan_sgd.keras", tk::optimizers::SGD());
  const std::string adam = file_with("plan_adam.keras", tk::optimizers::Adam());
  const std::string momentum = file_with("plan_sgd_momentum.keras", tk::optimizers::SGD({.momentum = 0.9f}));
  const std::string sgd_line = spec_line("sgd"), adam_line = spec_line("adam"), one_slot_line = spec_line("rmsprop");
  EXPECT_NE(sgd_line.find(" 0 B "), std::string::npos) << sgd_line;
  ASSERT_NE(sgd_line, one_slot_line);
  ASSERT_NE(one_slot_line, adam_line);
  EXPECT_EQ(optimizer_line(run_cli("plan --model " + quote(momentum) + " --batch-size 32")), one_slot_line);
  EXPECT_EQ(optimizer_line(run_cli("plan --model " + quote(sgd) + " --batch-size 32")), sgd_line);
  EXPECT_EQ(optimizer_line(run_cli("plan --model " + quote(adam) + " --batch-size 32")), adam_line);
  EXPECT_EQ(optimizer_line(run_cli("plan --model " + quote(sgd) + " --batch-size 32 --optimizer adam")), adam_line);
  EXPECT_EQ(optimizer_line(run_cli("plan --model " + quote(adam) + " --batch-size 32 --optimizer sgd")), sgd_line);
}

TEST(CliFit, EveryOptimizerRuns) {
  for (const char* opt : {"sgd", "adam", "adamw", "rmsprop", "SGD"}) {
    Result r = run_cli("fit" + plain_data().args() + " --model dense:10 --optimizer " + opt + " --epochs 1 -v 0");
    EXPECT_EQ(r.code, 0) << opt << "\n" << describe(r);
    EXPECT_CONTAINS(r.out, "test_accuracy:");
  }
}

TEST(CliFit, ValidationSplitShowsValLoss) {
  Result r =
      run_cli("fit" + plain_data().args() + " --model dense:10 --epochs 1 --validation-split 0.25 -v 2 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "val_loss:");
  EXPECT_CONTAINS(r.out, "val_accuracy:");
}

// ---------------------------------------------------------------- data errors

TEST(CliErrors, MissingFile) {
  const std::string missing = path_of("no-such-images-idx3-ubyte");
  DataFiles d = plain_data();
  d.train_images = missing;
  Result r = run_cli("fit" + d.args() + " --epochs 1 -v 0");
  expect_user_error(r, {missing});
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

TEST(CliErrors, MissingDataDir) {
  const std::string dir = path_of("no-such-dir");
  Result r = run_cli("fit --data-dir " + quote(dir) + " --epochs 1 -v 0");
  expect_user_error(r, {dir});
}

TEST(CliErrors, IncompleteFileOptions) {
  Result r = run_cli("fit --train-images " + quote(plain_data().train_images) + " --epochs 1 -v 0");
  expect_user_error(r, {"--test-labels"});
}

TEST(CliErrors, TruncatedIdx) {
  Bytes full = read_bytes(plain_data().train_images);
  ASSERT_GT(full.size(), 5000u);
  const std::string cut = write_file("truncated-images", Bytes(full.begin(), full.begin() + 5000));
  DataFiles d = plain_data();
  d.train_images = cut;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {cut, "offset", "truncated"});

  // The same inside a gzip stream: the gzipped copy of a truncated file.
  const std::string cut_gz = write_gz("truncated-images.gz", Bytes(full.begin(), full.begin() + 5000));
  d.train_images = cut_gz;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {cut_gz, "offset"});

  // A gzip file cut in the middle of its compressed stream.
  Bytes gz = read_bytes(gz_data().train_images);
  ASSERT_GT(gz.size(), 200u);
  const std::string cut_stream =
      write_file("cut-stream-images.gz", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  d.train_images = cut_stream;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {cut_stream, "offset"});
}

TEST(CliErrors, BadMagic) {
  Bytes b = read_bytes(plain_data().train_labels);
  b[0] = 0x12;
  b[1] = 0x34;
  const std::string bad = write_file("bad-magic-labels", b);
  DataFiles d = plain_data();
  d.train_labels = bad;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {bad});

  // An unknown type code.
  b = read_bytes(plain_data().test_images);
  b[2] = 0x42;
  const std::string bad_type = write_file("bad-type-images", b);
  d = plain_data();
  d.test_images = bad_type;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {bad_type, "0x42"});
}

TEST(CliErrors, CorruptGzip) {
  Bytes gz = read_bytes(gz_data().train_images);
  ASSERT_GT(gz.size(), 200u);
  // Damage the deflate data (the gzip header is 10 bytes): invalid codes or a CRC mismatch.
  for (size_t i = 20; i < 60; ++i) gz[i] = static_cast<uint8_t>(gz[i] ^ 0xA5);
  const std::string bad = write_file("corrupt-images.gz", gz);
  DataFiles d = gz_data();
  d.train_images = bad;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {bad});

  // A damaged CRC in the trailer only.
  Bytes crc = read_bytes(gz_data().test_labels);
  crc[crc.size() - 8] = static_cast<uint8_t>(crc[crc.size() - 8] ^ 0xFF);
  const std::string bad_crc = write_file("bad-crc-labels.gz", crc);
  d = gz_data();
  d.test_labels = bad_crc;
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {bad_crc});
}

TEST(CliErrors, ImageLabelCountMismatch) {
  Split s = make_split(100, 9);
  const std::string labels = write_file("labels-100", s.labels);
  DataFiles d = plain_data();
  d.train_labels = labels;  // 256 images, 100 labels
  expect_user_error(run_cli("fit" + d.args() + " --epochs 1 -v 0"), {labels, "256", "100"});
}

// ---------------------------------------------------------------- argument errors

struct BadArg {
  const char* args;
  std::vector<std::string> needles;
};

void PrintTo(const BadArg& b, std::ostream* os) { *os << '"' << b.args << '"'; }

class CliBadArguments : public ::testing::TestWithParam<BadArg> {};

TEST_P(CliBadArguments, OneErrorLineNamingTheValue) {
  const BadArg& p = GetParam();
  Result r = run_cli("fit" + plain_data().args() + " -v 0 " + p.args);
  expect_user_error(r, p.needles);
  EXPECT_TRUE(r.out.empty()) << describe(r);
}

INSTANTIATE_TEST_SUITE_P(
    CliErrors, CliBadArguments,
    ::testing::Values(BadArg{"--model conv:3", {"conv"}}, BadArg{"--model dense:10:foo", {"foo"}},
                      BadArg{"--model dense:0", {"dense:0"}}, BadArg{"--model dense:abc", {"dense:abc"}},
                      BadArg{"--model dense:64:relu,dropout:1.5,dense:10", {"1.5"}},
                      BadArg{"--model dense:64,,dense:10", {"--model"}}, BadArg{"--model conv2d:0:3", {"conv2d:0:3"}},
                      BadArg{"--model conv2d:8:3:relu:wide", {"wide"}}, BadArg{"--model batchnorm:fast", {"fast"}},
                      BadArg{"--model maxpool:2:2", {"maxpool:2:2"}}, BadArg{"-l -0.1", {"-0.1"}},
                      BadArg{"--learning-rate=-2", {"-2"}}, BadArg{"--batch-size 0", {"--batch-size", "0"}},
                      BadArg{"--batch-size -4", {"-4"}}, BadArg{"--epochs -1", {"--epochs", "-1"}},
                      BadArg{"--validation-split 1.5", {"1.5"}}),
    [](const ::testing::TestParamInfo<BadArg>& param) { return "Case" + std::to_string(param.index); });

TEST(CliErrors, LabelsBeyondModelUnits) {
  Split train = make_split(256, 5, 20);  // labels 0..19 with the default dense:10 head
  DataFiles d = plain_data();
  d.train_labels = write_file("labels-0-19", train.labels);
  d.train_images = write_file("images-0-19", train.images);
  Result r = run_cli("fit" + d.args() + " --epochs 1 --batch-size 32 -v 0");
  expect_user_error(r, {"label ", "10"});
  if (r.error_lines.size() == 1) {
    const std::string& line = r.error_lines[0];
    const size_t p = line.find("label ");
    ASSERT_NE(p, std::string::npos) << line;
    const long label = std::strtol(line.c_str() + p + 6, nullptr, 10);
    EXPECT_GE(label, 10) << line;
    EXPECT_LE(label, 19) << line;
  }
}

}  // namespace

// ---------------------------------------------------------------- memory budgets through the CLI
namespace {
size_t peak_of(const std::string& out, size_t* budget) {
  unsigned long long peak = 0, limit = 0;
  const size_t p = out.find("peak memory: ");
  if (p == std::string::npos) return 0;
  std::sscanf(out.c_str() + p, "peak memory: %llu bytes (%*[^)]) of a %llu-byte budget", &peak, &limit);
  *budget = limit;
  return peak;
}
}  // namespace

TEST(CliMemory, OutOfMemoryPrintsTheReportAndExitsNonZero) {
  const Result r = run_cli("fit -v 0 --epochs 1 --batch-size 256 --model dense:4096:relu,dense:4096:relu,dense:10" +
                           plain_data().args());
  ASSERT_EQ(r.code, 0) << describe(r);  // fits without a budget (about 0.6 GiB of weights and Adam state)
  const std::string env = "TK_MEMORY_LIMIT=48MiB ";
  const std::string cmd = env + quote(TK_CLI_PATH) +
                          " fit -v 0 --epochs 1 --batch-size 256 --model dense:4096:relu,dense:4096:relu,dense:10" +
                          plain_data().args() + " >" + quote(path_of("oom_out")) + " 2>" + quote(path_of("oom_err"));
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = read_text(path_of("oom_err"));
  for (const char* part : {"trainkit: error: OOM when allocating", "budget 48.00 MiB (TK_MEMORY_LIMIT=48MiB)",
                           "largest live allocations", "dense/kernel", "what to do", "trainkit plan"})
    EXPECT_CONTAINS(err, part);
  EXPECT_FALSE(contains(err, "Aborted"));
}

// Fashion-MNIST stays uint8 in memory (47 MB, not 188 MB as float32) and is scaled batch by batch by the
// model's Rescaling, so the default job trains under a 96 MiB budget; a budget too small for the data says
// the data is the problem, with the remedies for data.
TEST(CliMemory, DefaultJobTrainsUnderNinetySixMebibytesWithTheDataKeptNarrow) {
  const char* dir = std::getenv("TK_FASHION_MNIST_DIR");
  if (!std::filesystem::exists(dir && *dir ? dir : "/usr/share/datasets/fashion-mnist"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  const Result r = run_cli("fit -v 2 --epochs 1 --no-summary", "TK_MEMORY_LIMIT=96MiB");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "test_accuracy");
  EXPECT_CONTAINS(r.out, "holds uint8; each batch is converted to float32 with x * ");
  const Result small = run_cli("fit -v 2 --epochs 1 --no-summary", "TK_MEMORY_LIMIT=40MiB");
  EXPECT_EQ(small.code, 1) << describe(small);
  for (const char* part :
       {"train-images-idx3-ubyte", "this is data, not the model", "stream it from the file", "keep it narrow"})
    EXPECT_CONTAINS(small.err, part);
  EXPECT_FALSE(contains(small.err, "freeze layers")) << "model remedies for a data allocation";
}

// plan --replicas N: one replica's plan under MirroredStrategy over N logical cpu devices, each with its share of
// the budget; its share of the global batch; the largest global batch that fits; and the gradients' all-reduce
// outputs, which one device's plan does not have.
TEST(CliPlan, ReplicasPlanOneReplicasShareUnderItsShareOfTheBudget) {
  const Result r = run_cli("plan --replicas 3 --memory-limit 96MiB --batch-size 128");
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* part :
       {"MirroredStrategy over cpu:0, cpu:1, cpu:2 (3 replicas in sync)", "split 3 ways", "43 rows",
        "Memory plan of one training step, batch size 43", "Budget 32.00 MiB on cpu:0", "A replica's share of 43 fits"})
    EXPECT_CONTAINS(r.out, part);
  const auto number_after = [](const std::string& text, const std::string& key) {
    const size_t at = text.find(key);
    return at == std::string::npos ? -1LL : std::atoll(text.c_str() + at + key.size());
  };
  const long long share = number_after(r.out, "the largest share that fits is ");
  EXPECT_GT(share, 43);
  EXPECT_EQ(number_after(r.out, "a global batch of "), 3 * share);
  const Result one = run_cli("plan --memory-limit 32MiB --batch-size 43");  // one device, the same rows and budget
  ASSERT_EQ(one.code, 0) << describe(one);
  const auto total = [](const std::string& text) {
    const size_t at = text.find("total (peak)");
    return at == std::string::npos ? 0.0 : std::atof(text.c_str() + at + 12);
  };
  EXPECT_GT(total(r.out), total(one.out)) << "a replica also holds its all-reduced gradients";
  const Result small = run_cli("plan --replicas 4 --batch-size 3");
  EXPECT_EQ(small.code, 1) << describe(small);
  EXPECT_CONTAINS(small.err, "--batch-size 3 is smaller than --replicas 4");
  const Result none = run_cli("plan --replicas 0");
  EXPECT_NE(none.code, 0) << describe(none);
}

// plan --device cuda / --gpu NAME on a machine without a CUDA device: the programs traced and planned for the CUDA
// backend under the GPU's memory (issue 13: size a GPU job on a laptop). The weights, optimizer state and arena are
// the cpu plan's; the workspace is the CUDA kernels' (cuBLASLt's 32 MiB per GEMM), not oneDNN's.
TEST(CliPlan, PlansAGpuThisMachineDoesNotHave) {
  const Result r = run_cli("plan --device cuda --memory-limit 1GiB --batch-size 128");
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* part : {"Planning for cuda:0 with a 1.00 GiB budget, without one here",
                           "Budget 1.00 GiB on cuda:0 (planned, not on this machine)", "Batch 128 fits"})
    EXPECT_CONTAINS(r.out, part);
  const auto line_value = [](const std::string& text, const std::string& key) {
    const size_t at = text.find("\n  " + key);
    return at == std::string::npos ? std::string() : text.substr(at + 3 + key.size(), 30);
  };
  const Result cpu = run_cli("plan --device cpu --memory-limit 1GiB --batch-size 128");
  ASSERT_EQ(cpu.code, 0) << describe(cpu);
  for (const char* same : {"weights", "optimizer state", "arena"}) {
    EXPECT_NE(line_value(r.out, same), "") << same;
    EXPECT_EQ(line_value(r.out, same), line_value(cpu.out, same)) << same;
  }
  // A CUDA build plans with the CUDA kernels' workspaces (one 32 MiB cuBLASLt workspace for the MLP); without
  // CUDA the plan says it has none. (A stale check once asked the kernel table before it was filled and printed
  // "no CUDA kernels" in a CUDA build.)
  if (tk::runtime::cuda_built()) {
    EXPECT_CONTAINS(r.out, "Kernel workspaces (cuBLASLt's, one per GEMM");
    EXPECT_CONTAINS(line_value(r.out, "workspace"), "32.00 MiB");
  } else {
    EXPECT_CONTAINS(r.out, "This build has no CUDA kernels");
  }
  // A card by name; the CNN's convolutions and pooling have CUDA kernels whose workspaces are planned.
  const Result t4 = run_cli("plan --model cnn --gpu t4");
  ASSERT_EQ(t4.code, 0) << describe(t4);
  EXPECT_CONTAINS(t4.out, "Planning for cuda:0 (T4) with a 16.00 GiB budget");
  EXPECT_FALSE(contains(t4.out, "Not counted yet")) << t4.out;
  // Too large a batch: exit 3 and the largest that fits.
  const Result big = run_cli("plan --model cnn --device cuda --memory-limit 1GiB --batch-size 4096");
  EXPECT_EQ(big.code, 3) << describe(big);
  const size_t at = big.out.find("the largest batch that fits is ");
  ASSERT_NE(at, std::string::npos) << describe(big);
  const long long best = std::atoll(big.out.c_str() + at + 31);
  EXPECT_GT(best, 0);
  EXPECT_LT(best, 4096);
  // Without the GPU's memory, or with a card trainkit does not know: one clear error each.
  const Result none = run_cli("plan --device cuda");
  EXPECT_EQ(none.code, 1) << describe(none);
  EXPECT_CONTAINS(none.err, "--memory-limit 24GiB, or --gpu NAME");
  const Result unknown = run_cli("plan --gpu X100");
  EXPECT_EQ(unknown.code, 1) << describe(unknown);
  EXPECT_CONTAINS(unknown.err, "A100-40GB");
}

// One vocabulary everywhere: --device, --dtype-policy, --memory-limit (= TK_MEMORY_LIMIT, which it overrides).
TEST(CliRunOptions, DeviceDtypePolicyAndMemoryLimit) {
  const Result ok = run_cli("plan --device cpu --dtype-policy float32 --memory-limit 64MiB --batch-size 32");
  ASSERT_EQ(ok.code, 0) << describe(ok);
  EXPECT_CONTAINS(ok.out, "64.00 MiB");
  const Result env = run_cli("plan --memory-limit 80MiB --batch-size 32", "TK_MEMORY_LIMIT=20MiB");
  ASSERT_EQ(env.code, 0) << describe(env);
  EXPECT_CONTAINS(env.out, "80.00 MiB");  // the flag wins over the environment
  const Result cuda = run_cli("fit --device cuda:0 --epochs 1" + plain_data().args());
  EXPECT_EQ(cuda.code, 1) << describe(cuda);
  ASSERT_EQ(cuda.error_lines.size(), 1u) << describe(cuda);
  EXPECT_CONTAINS(cuda.error_lines[0], "cuda");
  EXPECT_FALSE(contains(cuda.out, "Epoch")) << "refused before any data is loaded";
  const Result mixed = run_cli("plan --dtype-policy mixed_float16");
  EXPECT_EQ(mixed.code, 0) << describe(mixed);
  EXPECT_CONTAINS(mixed.out, "dtype policy mixed_float16: under float32 the step would take");
  const Result half = run_cli("plan --dtype-policy float16");  // 16-bit variables: refused, naming the remedy
  EXPECT_EQ(half.code, 1) << describe(half);
  EXPECT_CONTAINS(half.err, "mixed_float16");
  for (const char* bad : {"--device tpu", "--device cuda:x", "--dtype-policy float64", "--memory-limit lots"}) {
    const Result r = run_cli(std::string("plan ") + bad);
    EXPECT_NE(r.code, 0) << bad << "\n" << describe(r);
    EXPECT_EQ(r.error_lines.size(), 1u) << bad << "\n" << describe(r);
  }
}

TEST(CliMemory, PlanShowsTotalsAndTheLargestBatchThatFits) {
  const Result r = run_cli("plan --batch-size 64");
  ASSERT_EQ(r.code, 0) << describe(r);
  for (const char* part : {"Memory plan of one training step, batch size 64", "dense_1", "optimizer state",
                           "total (peak)", "largest batch that fits"})
    EXPECT_CONTAINS(r.out, part);
  const std::string cmd = "TK_MEMORY_LIMIT=64MiB " + quote(TK_CLI_PATH) + " plan --model cnn --batch-size 4096 >" +
                          quote(path_of("plan_out")) + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << read_text(path_of("plan_out"));
  EXPECT_CONTAINS(read_text(path_of("plan_out")), "does NOT fit");
}

// --batch-size auto: the plan of the largest batch that fits, which then fits (exit 0) and is the batch named.
TEST(CliMemory, PlanBatchSizeAutoPlansTheLargestBatchThatFits) {
  const Result r = run_cli("plan --model cnn --batch-size auto --memory-limit 64MiB");
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string head = "--batch-size auto: the largest batch that fits is ";
  const size_t at = r.out.find(head);
  ASSERT_NE(at, std::string::npos) << describe(r);
  const long long best = std::atoll(r.out.c_str() + at + head.size());
  EXPECT_GT(best, 0);
  EXPECT_CONTAINS(r.out, "Memory plan of one training step, batch size " + std::to_string(best));
  EXPECT_CONTAINS(
      r.out, "Batch " + std::to_string(best) + " fits; the largest batch that fits is " + std::to_string(best) + ".");
  expect_usage_error(run_cli("plan --batch-size lots"), {"--batch-size: 'lots' is not an integer (or \"auto\")"},
                     "trainkit plan");
  const Result zero = run_cli("plan --batch-size 0");
  EXPECT_NE(zero.code, 0);
  EXPECT_CONTAINS(zero.err, "--batch-size must be a positive integer or \"auto\", got 0");
}

TEST(CliMemory, TwoProcessesWithFractionBudgetsBothFinishUnderBudget) {
  std::string cmds;
  for (int i = 0; i < 2; ++i)
    cmds += "TK_MEMORY_FRACTION=0.45 " + quote(TK_CLI_PATH) + " fit -v 0 --epochs 2 --batch-size 32" +
            plain_data().args() + " >" + quote(path_of("two_" + std::to_string(i))) + " 2>&1 & ";
  const int status = std::system(("(" + cmds + "wait)").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  for (int i = 0; i < 2; ++i) {
    const std::string out = read_text(path_of("two_" + std::to_string(i)));
    EXPECT_CONTAINS(out, "test_accuracy:");
    EXPECT_CONTAINS(out, "TK_MEMORY_FRACTION=0.45");
    size_t budget = 0;
    const size_t peak = peak_of(out, &budget);
    EXPECT_GT(peak, 0u) << out;
    EXPECT_LE(peak, budget) << out;
  }
}

// ---------------------------------------------------------------- --data: every file format

namespace data_files {

std::string fixture(const std::string& name) { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/cli/" + name; }

// 400 training / 100 test rows, y = (x0 + x1 > 0), written by NumPy, h5py, TensorFlow and Python's csv
// (tests/fixtures/data/cli/gen_cli_fixtures.py). Every format must train the same model to the same result.
double test_accuracy(const Result& r) {
  const size_t at = r.out.find("test_accuracy: ");
  return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + 15));
}

TEST(CliData, EveryFormatTrainsTheSameModelToTheSameAccuracy) {
  const std::string common = " --model dense:16:relu,dense:2 --epochs 10 -l 0.01 --batch-size 32 -v 2 --no-summary";
  const std::vector<std::pair<std::string, std::string>> formats{
      {"npz", ""}, {"h5", ""}, {"csv", " --y label"}, {"tfrecord", " --x x:4 --y y"}};
  std::vector<double> acc;
  for (const auto& [ext, extra] : formats) {
    Result r = run_cli("fit --data " + quote(fixture("train." + ext)) + " --validation-data " +
                       quote(fixture("test." + ext)) + extra + common);
    ASSERT_EQ(r.code, 0) << ext << "\n" << describe(r);
    EXPECT_CONTAINS(r.out, "input wait");
    acc.push_back(test_accuracy(r));
    EXPECT_GT(acc.back(), 0.9) << ext << "\n" << r.out;
  }
  for (double a : acc) EXPECT_EQ(a, acc[0]);  // same rows, same seed: the same training run
}

// float16 features (NumPy-written) stay float16 and are converted at staging, logged once: the losses equal
// those of the same values stored as float32 (tests/fixtures/data/half_data/gen_half_data_fixtures.py).
TEST(CliData, Float16FeaturesTrainLikeTheSameValuesInFloat32) {
  const std::string dir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/half_data/";
  const std::string common = " --x x --y y --model dense:16:relu,dense:3 --epochs 3 -v 2 --no-summary";
  const Result r16 = run_cli("fit --data " + quote(dir + "x16.npz") + common);
  const Result r32 = run_cli("fit --data " + quote(dir + "x32.npz") + common);
  ASSERT_EQ(r16.code, 0) << describe(r16);
  ASSERT_EQ(r32.code, 0) << describe(r32);
  auto losses = [](const std::string& out) {
    std::vector<std::string> v;
    for (size_t at = out.find("loss: "); at != std::string::npos; at = out.find("loss: ", at + 1))
      v.push_back(out.substr(at, 12));
    return v;
  };
  ASSERT_EQ(losses(r16.out).size(), 3u) << r16.out;
  EXPECT_EQ(losses(r16.out), losses(r32.out));
  const std::string note = "input 'input_layer' holds float16; each batch is converted to float32 as it is staged";
  EXPECT_CONTAINS(r16.out, note);
  EXPECT_EQ(r16.out.find(note), r16.out.rfind(note)) << "logged once";
  EXPECT_FALSE(contains(r32.out, "converted")) << r32.out;
}

TEST(CliData, IdxFilesThroughThePipeline) {
  const DataFiles& d = plain_data();  // names without extensions: --format idx
  Result r = run_cli("fit --data " + quote(d.train_images) + " --y " + quote(d.train_labels) + " --validation-data " +
                     quote(d.test_images) + " --validation-y " + quote(d.test_labels) +
                     " --format idx --epochs 3 -v 2 --no-summary");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_GT(test_accuracy(r), 0.5) << r.out;
  Result missing = run_cli("fit --data " + quote(d.train_images) + " --y " + quote(d.train_labels) +
                           " --validation-data " + quote(d.test_images) + " --format idx --epochs 1 -v 0");
  EXPECT_NE(missing.code, 0);
  ASSERT_EQ(missing.error_lines.size(), 1u) << describe(missing);
  EXPECT_CONTAINS(missing.error_lines[0], "--validation-y");
}

TEST(CliData, BadDataOptionsAreClearErrors) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases{
      {"--data " + quote(fixture("train.csv")), "name the label column with --y"},
      {"--data " + quote(fixture("train.csv")) + " --y nope", "no column named 'nope'"},
      {"--data " + quote(fixture("train.npz")) + " --x nope", "nope"},
      {"--data " + quote(fixture("train.h5")) + " --x /missing", "/missing"},
      {"--data " + quote(fixture("train.tfrecord")), "--x NAME[:DIMS[:DTYPE]]"},
      {"--data " + quote(fixture("train.tfrecord")) + " --x x:5 --y y", "x"},
      {"--data " + quote(fixture("gen_cli_fixtures.py")), "pass --format"},
      {"--data " + quote(fixture("train.npz")) + " --format parquet", "unknown format 'parquet'"},
      {"--data " + quote(path_of("does-not-exist.npz")), "does-not-exist.npz"},
      {"--data " + quote(fixture("train.npz")) + " --validation-split 0.1", "--validation-data"},
      {"--validation-data " + quote(fixture("test.npz")), "--validation-data needs --data"},
  };
  for (const Case& c : cases) {
    Result r = run_cli("fit " + c.args + " --epochs 1 -v 0");
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_TRUE(r.exited) << c.args;
    ASSERT_EQ(r.error_lines.size(), 1u) << c.args << "\n" << describe(r);
    EXPECT_CONTAINS(r.error_lines[0], c.expect);
  }
}

// "micro_batch_size auto: 62 per step of 256" -> {62, 256}; {-1, -1} when the line is absent.
std::pair<long long, long long> auto_micro_batch(const std::string& out) {
  long long micro = -1, batch = -1;
  const size_t at = out.find("micro_batch_size auto: ");
  if (at == std::string::npos ||
      std::sscanf(out.c_str() + at, "micro_batch_size auto: %lld per step of %lld", &micro, &batch) != 2)
    return {-1, -1};
  return {micro, batch};
}

TEST(CliData, MicroBatchSizeAutoIsResolvedForData) {
  // --micro-batch-size auto used to be dropped (0: off) with --data: no resolution, no report line.
  const std::string npz = "fit --data " + quote(fixture("train.npz")) +
                          " --model dense:16:relu,dense:2 --epochs 1 --batch-size 32 --micro-batch-size auto -v 2";
  Result r = run_cli(npz);
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_EQ(auto_micro_batch(r.out), std::make_pair(32LL, 32LL)) << r.out;  // a batch that fits is not split

  // Under a budget where the plain plan of a batch of 256 does not fit, the batch is split into micro-batches.
  const DataFiles& d = plain_data();
  Result split = run_cli("fit --data " + quote(d.train_images) + " --y " + quote(d.train_labels) +
                             " --format idx --model dense:1024:relu,dense:10 --batch-size 256 --micro-batch-size auto"
                             " --epochs 1 -v 2 --no-summary",
                         "TK_MEMORY_LIMIT=20MiB");
  ASSERT_EQ(split.code, 0) << describe(split);
  const auto [micro, batch] = auto_micro_batch(split.out);
  EXPECT_EQ(batch, 256) << split.out;
  EXPECT_GT(micro, 0) << split.out;
  EXPECT_LT(micro, 256) << split.out;
  EXPECT_CONTAINS(split.out, "Epoch 1/1");
}

TEST(CliData, BatchSizeAutoIsReportedAlikeForDataAndArrays) {
  Result data =
      run_cli("fit --data " + quote(fixture("train.npz")) + " --validation-data " + quote(fixture("test.npz")) +
              " --model dense:16:relu,dense:2 --epochs 1 --batch-size auto -v 2");
  ASSERT_EQ(data.code, 0) << describe(data);
  EXPECT_CONTAINS(data.out, "batch_size auto: 1024 (plan ");  // a stream's size is unknown: FitOptions' cap
  EXPECT_CONTAINS(data.out, " available)");
  EXPECT_CONTAINS(data.out, "test_accuracy:");
  Result arrays =
      run_cli("fit" + plain_data().args() + " --model dense:16:relu,dense:10 --epochs 1 --batch-size auto -v 2");
  ASSERT_EQ(arrays.code, 0) << describe(arrays);
  EXPECT_CONTAINS(arrays.out, "batch_size auto: 256 (plan ");  // at most the sample count
  EXPECT_CONTAINS(arrays.out, " available)");
}

// --batch-size auto under --replicas 2: each replica runs half the global batch under its half of the budget, so the
// global batch is 2 x the share that fits one replica (what `trainkit plan --replicas 2` reports), not the batch that
// would fit one device.
TEST(CliData, BatchSizeAutoUnderReplicasIsTwiceWhatOneReplicaFits) {
  const DataFiles& d = plain_data();
  const std::string model = " --model dense:1024:relu,dense:10 --memory-limit 40MiB --replicas 2";
  const Result plan = run_cli("plan --batch-size 2" + model);
  ASSERT_EQ(plan.code, 0) << describe(plan);
  const size_t at = plan.out.find("the largest share that fits is ");
  ASSERT_NE(at, std::string::npos) << plan.out;
  const long long share = std::atoll(plan.out.c_str() + at + 31);
  ASSERT_GT(share, 0) << plan.out;
  ASSERT_LT(share, 512) << "the memory decides, not the cap (1024 over 2 replicas)";
  const Result fit = run_cli("fit --data " + quote(d.train_images) + " --y " + quote(d.train_labels) +
                             " --format idx --batch-size auto --epochs 1 -v 2 --no-summary" + model);
  ASSERT_EQ(fit.code, 0) << describe(fit);
  EXPECT_CONTAINS(
      fit.out, "batch_size auto: " + std::to_string(2 * share) + " (2 replicas x " + std::to_string(share) + "; plan ");
  EXPECT_CONTAINS(fit.out, " available on the tightest, cpu:");
  EXPECT_CONTAINS(fit.out, "1/1 - ");  // 256 rows: one step of the global batch
}

TEST(CliData, CorruptRecordNamesFileAndOffset) {
  Bytes bytes = read_bytes(fixture("train.tfrecord"));
  bytes[bytes.size() / 2] ^= 0x40;  // inside some record's data: its CRC no longer matches
  const std::string bad = write_file("bad.tfrecord", bytes);
  Result r = run_cli("fit --data " + quote(bad) + " --x x:4 --y y --epochs 1 -v 0");
  EXPECT_NE(r.code, 0);
  ASSERT_EQ(r.error_lines.size(), 1u) << describe(r);
  EXPECT_CONTAINS(r.error_lines[0], "bad.tfrecord");
  EXPECT_CONTAINS(r.error_lines[0], "offset");
}

}  // namespace data_files

// ---------------------------------------------------------------- callbacks from the command line
TEST(CliCallbacks, KeptBackupContinuesWithMoreEpochs) {
  const std::string dir = path_of("cli_backup");
  std::filesystem::remove_all(dir);
  Result first = run_cli("fit" + plain_data().args() + " --epochs 1 --batch-size 32 -v 2 --no-summary --backup-dir " +
                         quote(dir) + " --keep-backup");
  ASSERT_EQ(first.code, 0) << describe(first);
  EXPECT_FALSE(contains(first.out, "resuming")) << first.out;
  ASSERT_TRUE(std::filesystem::exists(dir + "/latest.tkstate"));
  Result more =
      run_cli("fit" + plain_data().args() + " --epochs 2 --batch-size 32 -v 2 --no-summary --backup-dir " + quote(dir));
  ASSERT_EQ(more.code, 0) << describe(more);
  EXPECT_CONTAINS(more.out, "resuming from");
  EXPECT_CONTAINS(more.out, "at epoch 2, batch 0 (step 8)");  // 256 samples / 32 = 8 steps done
  EXPECT_FALSE(contains(more.out, "Epoch 1/2")) << more.out;
  EXPECT_CONTAINS(more.out, "Epoch 2/2");
  EXPECT_FALSE(std::filesystem::exists(dir + "/latest.tkstate")) << "without --keep-backup the backup is removed";
  std::filesystem::remove_all(dir);
}

TEST(CliCallbacks, CsvLogAndEarlyStoppingRun) {
  const std::string csv = path_of("cli_log.csv");
  Result r = run_cli("fit" + plain_data().args() +
                     " --epochs 3 --batch-size 32 -v 0 --validation-split 0.25 --early-stopping 0 --csv-log " +
                     quote(csv) + " --terminate-on-nan --reduce-lr-on-plateau 5");
  ASSERT_EQ(r.code, 0) << describe(r);
  const std::string text = read_text(csv);
  EXPECT_EQ(text.substr(0, text.find('\n')), "epoch,accuracy,loss,val_accuracy,val_loss") << text;
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 2) << text;
  std::remove(csv.c_str());
}

// Issue 35: 0.1% of the float32 pixels NaN (about 200 of 256 x 784, in about 150 rows). The default MLP's first
// relu must not turn them into zeros: the loss is nan (as TensorFlow and PyTorch show it), and --terminate-on-nan
// (Keras' TerminateOnNaN) stops in the first epoch. With a relu that maps NaN to 0 the loss stays finite.
TEST(CliCallbacks, NaNPixelsShowAsANaNLossAndTerminateOnNaNStopsInTheFirstEpoch) {
  constexpr int64_t kRows = 256, kPixels = 784;
  std::mt19937 gen(35);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  tk::Tensor x = tk::Tensor::zeros(tk::Shape{kRows, kPixels});
  tk::Tensor y(tk::Shape{kRows}, tk::DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pixel(gen);
  std::uniform_int_distribution<int64_t> where(0, x.numel() - 1);
  for (int k = 0; k < x.numel() / 1000; ++k) x.data<float>()[where(gen)] = NAN;
  for (int64_t r = 0; r < kRows; ++r) y.data<int32_t>()[r] = static_cast<int32_t>(r % 10);
  const std::string xs = path_of("nan_pixels_x.npy"), ys = path_of("nan_pixels_y.npy");
  tk::data::save_npy(xs, x);
  tk::data::save_npy(ys, y);
  const std::string common = "fit --data " + quote(xs) + " --y " + quote(ys) + " --epochs 3 -v 2 --no-summary";

  // Every path a dense layer's relu can take: fused into the GEMM on each engine, and unfused (math::relu).
  for (const char* env : {"", "TK_GEMM=openblas", "TK_GEMM=onednn", "TK_FUSE=0"}) {
    const Result shown = run_cli(common, env);
    ASSERT_EQ(shown.code, 0) << env << "\n" << describe(shown);
    EXPECT_CONTAINS(shown.out, "Epoch 3/3");
    EXPECT_CONTAINS(shown.out, "loss: nan") << env;  // as Keras prints it, whatever the NaN's sign bit
    EXPECT_FALSE(contains(shown.out, "-nan")) << env << "\n" << shown.out;
    EXPECT_FALSE(contains(shown.out, "Invalid loss")) << shown.out;
  }

  const Result stopped = run_cli(common + " --terminate-on-nan");
  ASSERT_EQ(stopped.code, 0) << describe(stopped);
  EXPECT_CONTAINS(stopped.out, "Invalid loss, terminating training");
  EXPECT_CONTAINS(stopped.out, "Epoch 1/3");
  EXPECT_FALSE(contains(stopped.out, "Epoch 2/3")) << "stops in epoch 1\n" << stopped.out;
  std::remove(xs.c_str());
  std::remove(ys.c_str());
}

TEST(CliCallbacks, BadCallbackOptionsAreOneClearError) {
  const std::string d = plain_data().args() + " --epochs 1 -v 0";
  expect_user_error(run_cli("fit" + d + " --early-stopping 2 --monitor val_loss"),
                    {"--monitor val_loss", "no validation data"});
  expect_user_error(run_cli("fit" + d + " --backup-dir " + quote(path_of("bk")) + " --backup-freq 0"),
                    {"--backup-freq", "positive"});
  expect_user_error(run_cli("fit" + d + " --keep-backup"), {"--keep-backup", "--backup-dir"});
  expect_user_error(run_cli("fit" + d + " --early-stopping -3"), {"--early-stopping", ">= 0"});
}

namespace {
TEST(CliFit, LossAndMetricsFlagsTakeKerasNames) {
  // A softmax output and Keras' string loss (from probabilities); every metric is logged under its name.
  Result r = run_cli("fit" + plain_data().args() +
                     " --model dense:16:relu,dense:10,softmax --loss sparse_categorical_crossentropy"
                     " --metrics accuracy,sparse_top_k_categorical_accuracy --epochs 1 --batch-size 64 -v 0");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "test_accuracy:");
  EXPECT_CONTAINS(r.out, "test_sparse_top_k_categorical_accuracy:");
  Result bad = run_cli("fit" + plain_data().args() + " --loss hubber --epochs 1");
  EXPECT_NE(bad.code, 0) << describe(bad);
  EXPECT_CONTAINS(bad.err, "binary_focal_crossentropy");  // the known names
  Result bad_metric = run_cli("fit" + plain_data().args() + " --metrics accuracy,precission --epochs 1");
  EXPECT_NE(bad_metric.code, 0) << describe(bad_metric);
  EXPECT_CONTAINS(bad_metric.err, "mean_io_u");
}
}  // namespace
