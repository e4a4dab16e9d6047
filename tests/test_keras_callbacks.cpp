// Keras' built-in callbacks and resuming a fit: BackupAndRestore resumes bit for bit (arrays and Datasets,
// with shuffling and dropout), the training-state file rejects damage, and EarlyStopping, ReduceLROnPlateau,
// TerminateOnNaN, LearningRateScheduler and CSVLogger follow Keras 3's rules (keras/src/callbacks/*.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_data.h"
#include "trainkit/io/keras.h"
#include "trainkit/io/training_state_file.h"
#include "trainkit/trainkit.h"

namespace {

namespace fs = std::filesystem;
using tk::Tensor;
using namespace tk::callbacks;

using tk::testing::uniform;
Tensor labels(int64_t n, int classes, uint32_t seed) { return tk::testing::int_labels(n, classes, seed); }

// The same model every time: weights and dropout seeds come from the global seed.
std::unique_ptr<tk::Sequential> make_model() {
  tk::utils::set_random_seed(7);
  auto m = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{
      tk::layers::Input({8}), tk::layers::Dense(16, "relu"), tk::layers::Dropout(0.25f), tk::layers::Dense(3)});
  tk::optimizers::AdamOptions o;
  o.learning_rate = 0.01f;
  m->compile(tk::optimizers::Adam(o), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("tk_cb_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Throws (a stand-in for the process dying) once the optimizer has taken `at` steps.
struct CrashAt : tk::Callback {
  int64_t at;
  explicit CrashAt(int64_t step) : at(step) {}
  void on_train_batch_end(int64_t, const tk::Logs&) override {
    if (model->optimizer()->iterations() == at) throw std::runtime_error("simulated crash");
  }
};

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    EXPECT_EQ(std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()), 0) << "weight " << i << " differs";
  }
}

const Tensor& x_data() {
  static const Tensor x = uniform({100, 8}, 1);
  return x;
}
const Tensor& y_data() {
  static const Tensor y = labels(100, 3, 2);
  return y;
}

tk::FitOptions fit_options(std::vector<tk::CallbackPtr> callbacks) {
  tk::FitOptions o;
  o.batch_size = 16;  // 7 steps per epoch, the last one partial
  o.epochs = 3;
  o.verbose = 0;
  o.seed = 99;
  o.validation_split = 0.2f;
  o.callbacks = std::move(callbacks);
  return o;
}

}  // namespace

// ---------------------------------------------------------------- resuming
TEST(BackupAndRestore, ResumesArraysFitBitForBitAfterACrashAtAnyStep) {
  auto reference = make_model();
  reference->fit(x_data(), y_data(), fit_options({}));
  const std::vector<Tensor> expected = reference->get_weights();

  // Steps per epoch: ceil(80 / 16) = 5; 15 in all. Crash mid-epoch, at an epoch boundary and near the end.
  for (int64_t crash : {2, 5, 7, 14}) {
    for (int64_t freq : {0, 1, 3}) {
      SCOPED_TRACE("crash after step " + std::to_string(crash) + ", save_freq " + std::to_string(freq));
      const fs::path dir = fresh_dir("arrays");
      auto backup = std::make_shared<BackupAndRestore>(dir.string(), BackupAndRestoreOptions{.save_freq = freq});
      {
        auto first = make_model();
        EXPECT_THROW(first->fit(x_data(), y_data(), fit_options({backup, std::make_shared<CrashAt>(crash)})),
                     std::runtime_error);
      }
      auto second = make_model();  // a new process would build the same model
      second->fit(x_data(), y_data(), fit_options({backup}));
      if (freq == 0 && crash < 5) EXPECT_FALSE(backup->restored_from().has_value());  // no epoch had ended
      if (freq == 1) ASSERT_TRUE(backup->restored_from().has_value());
      expect_same_bits(second->get_weights(), expected);
      EXPECT_FALSE(fs::exists(backup->backup_path())) << "delete_checkpoint removes the backup at the end";
      fs::remove_all(dir);
    }
  }
}

TEST(BackupAndRestore, ResumesDatasetFitBitForBit) {
  auto make_data = [] { return tk::data::Dataset::from_tensor_slices({x_data(), y_data()}).shuffle(100, 5).batch(16); };
  auto reference = make_model();
  tk::FitOptions o = fit_options({});
  o.validation_split = 0.0f;
  reference->fit(make_data(), o);
  const std::vector<Tensor> expected = reference->get_weights();
  for (int64_t crash : {3, 7, 15}) {  // 7 steps per epoch
    SCOPED_TRACE("crash after step " + std::to_string(crash));
    const fs::path dir = fresh_dir("dataset");
    auto backup = std::make_shared<BackupAndRestore>(dir.string(), BackupAndRestoreOptions{.save_freq = 2});
    {
      auto first = make_model();
      tk::FitOptions f = fit_options({backup, std::make_shared<CrashAt>(crash)});
      f.validation_split = 0.0f;
      EXPECT_THROW(first->fit(make_data(), f), std::runtime_error);
    }
    auto second = make_model();
    tk::FitOptions f = fit_options({backup});
    f.validation_split = 0.0f;
    second->fit(make_data(), f);  // a fresh Dataset, as in a new process: its pass counter starts at 0
    ASSERT_TRUE(backup->restored_from().has_value());
    EXPECT_TRUE(backup->restored_from()->dataset);
    expect_same_bits(second->get_weights(), expected);
    fs::remove_all(dir);
  }
}

TEST(BackupAndRestore, RefusesAStateFromADifferentModel) {
  const fs::path dir = fresh_dir("mismatch");
  auto m = make_model();
  m->fit(x_data(), y_data(), fit_options({}));
  tk::io::save_training_state(dir / "latest.tkstate", m->training_state());
  tk::utils::set_random_seed(7);
  tk::Sequential other({tk::layers::Input({8}), tk::layers::Dense(4, "relu"), tk::layers::Dense(3)});
  other.compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const std::vector<Tensor> before = other.get_weights();
  try {
    other.fit(x_data(), y_data(), fit_options({std::make_shared<BackupAndRestore>(dir.string())}));
    FAIL() << "expected InvalidArgument";
  } catch (const tk::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("weight 0"), std::string::npos) << e.what();
  }
  expect_same_bits(other.get_weights(), before);  // nothing half-restored
  fs::remove_all(dir);
}

TEST(BackupAndRestore, ResumesOnTheThreadCountTheStateWasMadeWith) {
  auto m = make_model();
  tk::FitOptions o = fit_options({});
  o.epochs = 1;
  m->fit(x_data(), y_data(), o);
  tk::TrainingState s = m->training_state();
  const int threads = s.threads;
  ASSERT_GE(threads, 1);
  s.threads = 1;  // as if the backup came from a busy machine
  auto back = make_model();
  back->restore_training_state(s);
  EXPECT_EQ(back->training_state().threads, 1);
  s.threads = threads;  // and back to what this process runs on
  back->restore_training_state(s);
  EXPECT_EQ(back->training_state().threads, threads);
}

// ---------------------------------------------------------------- the state file
TEST(TrainingStateFile, RoundTripsAndRejectsEveryTruncationAndFlippedByte) {
  auto m = make_model();
  tk::FitOptions o = fit_options({});
  o.epochs = 1;
  m->fit(x_data(), y_data(), o);
  const tk::TrainingState s = m->training_state();
  const std::vector<std::byte> bytes = tk::io::encode_training_state(s);
  const tk::TrainingState back = tk::io::decode_training_state(bytes, "mem");
  EXPECT_EQ(back.iterations, s.iterations);
  EXPECT_EQ(back.position.epoch, 1);
  EXPECT_EQ(back.position.shuffle_seed, 99u);
  EXPECT_EQ(back.optimizer, "Adam");
  expect_same_bits(back.weights, s.weights);
  expect_same_bits(back.optimizer_slots, s.optimizer_slots);
  EXPECT_EQ(tk::io::encode_training_state(back), bytes);

  for (size_t n = 0; n < bytes.size(); n += 1 + n / 16)
    EXPECT_THROW(tk::io::decode_training_state(std::span(bytes.data(), n), "cut"), tk::FormatError) << n;
  for (size_t at = 0; at < bytes.size(); at += 1 + at / 8) {
    std::vector<std::byte> bad = bytes;
    bad[at] ^= std::byte{0x40};
    EXPECT_THROW(tk::io::decode_training_state(bad, "flipped"), tk::FormatError) << at;
  }
  try {
    tk::io::decode_training_state(std::span(bytes.data(), bytes.size() - 1), "ckpt.tkstate");
  } catch (const tk::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt.tkstate"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- monitors (Keras 3 rules)
namespace {
// Feeds on_epoch_end a sequence of values for `key`; returns the epoch at which stop_training was set (-1: never).
int run_monitor(tk::Callback& cb, tk::Model& m, const std::string& key, const std::vector<double>& values) {
  cb.model = &m;
  m.stop_training = false;
  tk::Logs logs;
  cb.on_train_begin(logs);
  for (size_t e = 0; e < values.size(); ++e) {
    logs.set(key, values[e]);
    cb.on_epoch_end(static_cast<int>(e), logs);
    if (m.stop_training) return static_cast<int>(e);
  }
  return -1;
}
}  // namespace

TEST(EarlyStopping, PatienceMinDeltaBaselineAndModeFollowKeras) {
  auto m = make_model();
  {  // e0 best 1.0; e1 improves; e2, e3 do not: patience 2 runs out at epoch 3
    EarlyStopping es({.patience = 2});
    EXPECT_EQ(run_monitor(es, *m, "val_loss", {1.0, 0.9, 0.95, 0.96, 0.97}), 3);
    EXPECT_EQ(es.best_epoch(), 1);
  }
  {  // 0.85 beats 1.0 by more than min_delta 0.1; 0.8 does not beat 0.85 by more than 0.1
    EarlyStopping es({.min_delta = 0.1, .patience = 1});
    EXPECT_EQ(run_monitor(es, *m, "val_loss", {1.0, 0.85, 0.8}), 2);
  }
  {  // accuracy is maximized in auto mode
    EarlyStopping es({.monitor = "val_accuracy", .patience = 1});
    EXPECT_EQ(run_monitor(es, *m, "val_accuracy", {0.5, 0.6, 0.7, 0.65}), 3);
  }
  {  // a baseline never beaten keeps counting through improvements; the first non-improvement then stops
    EarlyStopping es({.patience = 2, .baseline = 0.1});
    EXPECT_EQ(run_monitor(es, *m, "val_loss", {1.0, 0.9, 0.8, 0.85}), 3);
    EarlyStopping no_baseline({.patience = 2});
    EXPECT_EQ(run_monitor(no_baseline, *m, "val_loss", {1.0, 0.9, 0.8, 0.85}), -1);
  }
  {  // start_from_epoch: the first two epochs are not watched
    EarlyStopping es({.patience = 0, .start_from_epoch = 2});
    EXPECT_EQ(run_monitor(es, *m, "val_loss", {1.0, 2.0, 3.0, 4.0}), 3);
  }
  {  // a monitor that is not logged never stops training (Keras warns)
    EarlyStopping es({.monitor = "val_nothing", .mode = Mode::min});
    EXPECT_EQ(run_monitor(es, *m, "val_loss", {1.0, 2.0, 3.0}), -1);
  }
  EXPECT_THROW(EarlyStopping({.monitor = "val_mystery"}), tk::InvalidArgument);  // auto mode cannot tell
}

TEST(EarlyStopping, RestoreBestWeightsPutsBackTheBestEpoch) {
  auto m = make_model();
  // Save the weights after each epoch, then check that the best epoch's are restored at the end.
  struct Snap : tk::Callback {
    std::vector<std::vector<Tensor>> w;
    void on_epoch_end(int, const tk::Logs&) override { w.push_back(model->get_weights()); }
  };
  auto snap = std::make_shared<Snap>();
  auto es = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions{.monitor = "loss", .patience = 100, .restore_best_weights = true});
  tk::FitOptions o = fit_options({snap, es});
  o.epochs = 4;
  o.validation_split = 0.0f;
  const tk::History h = m->fit(x_data(), y_data(), o);
  const auto& loss = h.history.at("loss");
  const size_t best = static_cast<size_t>(std::min_element(loss.begin(), loss.end()) - loss.begin());
  EXPECT_EQ(es->best_epoch(), static_cast<int>(best));
  expect_same_bits(m->get_weights(), snap->w[best]);
}

TEST(ReduceLROnPlateau, ReducesAfterPatienceRespectsCooldownAndMinLr) {
  auto m = make_model();  // learning rate 0.01
  ReduceLROnPlateau r({.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.002});
  r.model = m.get();
  tk::Logs logs;
  r.on_train_begin(logs);
  std::vector<float> lr;
  for (double v : {1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}) {
    logs.set("val_loss", v);
    r.on_epoch_end(static_cast<int>(lr.size()), logs);
    lr.push_back(m->optimizer()->learning_rate());
  }
  // e0 best; e1 wait 1; e2 wait 2 -> 0.005, cooldown 1; e3 in cooldown; e4 wait 1; e5 wait 2 -> 0.0025;
  // e6 cooldown; e7 wait 1; e8 wait 2 -> max(0.00125, 0.002) = 0.002.
  const std::vector<float> expected{0.01f, 0.01f, 0.005f, 0.005f, 0.005f, 0.0025f, 0.0025f, 0.0025f, 0.002f};
  ASSERT_EQ(lr.size(), expected.size());
  for (size_t i = 0; i < lr.size(); ++i) EXPECT_FLOAT_EQ(lr[i], expected[i]) << "epoch " << i;
  EXPECT_THROW(ReduceLROnPlateau({.factor = 1.5}), tk::InvalidArgument);
}

TEST(TerminateOnNaN, StopsMidEpochOnANonFiniteLoss) {
  auto m = make_model();
  // A learning rate so large the loss overflows within a few steps.
  tk::optimizers::SGDOptions o;
  o.learning_rate = 1e30f;
  m->compile(tk::optimizers::SGD(o), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  tk::FitOptions f = fit_options({std::make_shared<TerminateOnNaN>()});
  f.epochs = 50;
  f.validation_split = 0.0f;
  const tk::History h = m->fit(x_data(), y_data(), f);
  ASSERT_EQ(h.epoch.size(), 1u) << "stopped within the first epoch";
  EXPECT_FALSE(std::isfinite(h.history.at("loss")[0]));
  EXPECT_LT(m->optimizer()->iterations(), 7);
}

TEST(LearningRateScheduler, SetsTheRateAtEachEpochStart) {
  auto m = make_model();
  struct Record : tk::Callback {
    std::vector<float> lr;
    void on_epoch_begin(int, const tk::Logs&) override { lr.push_back(model->optimizer()->learning_rate()); }
  };
  auto rec = std::make_shared<Record>();
  auto sched = std::make_shared<LearningRateScheduler>([](int epoch, double lr) { return epoch < 1 ? lr : lr * 0.1; });
  tk::FitOptions o = fit_options({sched, rec});
  m->fit(x_data(), y_data(), o);
  ASSERT_EQ(rec->lr.size(), 3u);
  EXPECT_FLOAT_EQ(rec->lr[0], 0.01f);
  EXPECT_FLOAT_EQ(rec->lr[1], 0.001f);
  EXPECT_FLOAT_EQ(rec->lr[2], 0.0001f);
  auto bad = std::make_shared<LearningRateScheduler>([](int, double) { return -1.0; });
  EXPECT_THROW(m->fit(x_data(), y_data(), fit_options({bad})), tk::InvalidArgument);
}

TEST(CSVLogger, WritesKerasColumnsAndAppends) {
  const fs::path dir = fresh_dir("csv");
  const std::string file = (dir / "log.csv").string();
  auto m = make_model();
  tk::FitOptions o = fit_options({std::make_shared<CSVLogger>(file)});
  o.epochs = 2;
  const tk::History h = m->fit(x_data(), y_data(), o);
  auto read = [&] {
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  std::string text = read();
  std::istringstream lines(text);
  std::string header, row0, row1;
  std::getline(lines, header);
  std::getline(lines, row0);
  std::getline(lines, row1);
  EXPECT_EQ(header, "epoch,accuracy,loss,val_accuracy,val_loss");  // sorted, as Keras' DictWriter
  EXPECT_EQ(row0.substr(0, 2), "0,");
  EXPECT_EQ(row1.substr(0, 2), "1,");
  // Values read back to the same double (shortest round-trip text, as Python's repr).
  const double loss1 = std::stod(row1.substr(row1.find(',', row1.find(',') + 1) + 1));
  EXPECT_EQ(loss1, h.history.at("loss")[1]);
  tk::FitOptions more = fit_options({std::make_shared<CSVLogger>(file, ',', true)});
  more.epochs = 1;
  m->fit(x_data(), y_data(), more);
  text = read();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);  // header once, then 3 rows
  fs::remove_all(dir);
}

TEST(BackupAndRestore, ASecondTrainingOnTheSameFolderIsRefused) {
  const fs::path dir = fresh_dir("locked");
  auto holder = std::make_shared<BackupAndRestore>(dir.string());
  auto m = make_model();
  // The first fit holds the folder while it runs; a second callback on the same folder is refused.
  struct Second : tk::Callback {
    std::string dir, message;
    void on_train_begin(const tk::Logs&) override {
      auto other = make_model();
      try {
        other->fit(x_data(), y_data(), fit_options({std::make_shared<BackupAndRestore>(dir)}));
      } catch (const tk::IoError& e) {
        message = e.what();
      }
    }
  };
  auto second = std::make_shared<Second>();
  second->dir = dir.string();
  m->fit(x_data(), y_data(), fit_options({holder, second}));
  EXPECT_NE(second->message.find("in use by another training (pid " + std::to_string(::getpid())), std::string::npos)
      << second->message;
  // Released at the end: the folder is free again.
  auto again = make_model();
  EXPECT_NO_THROW(again->fit(x_data(), y_data(), fit_options({std::make_shared<BackupAndRestore>(dir.string())})));
  fs::remove_all(dir);
}

// The fuzzer's seed is a real, current state file: a tiny model after one step (TK_UPDATE_FIXTURES=1 rewrites it).
TEST(TrainingStateFile, SeedCorpusIsCurrent) {
  tk::clear_session();  // names (sequential, dense) must not depend on the tests that ran before
  tk::utils::set_random_seed(3);
  tk::Sequential m({tk::layers::Input({3}), tk::layers::Dense(2)});
  m.compile(tk::optimizers::Adam(), "mse");
  m.train_on_batch({uniform({4, 3}, 5)}, {uniform({4, 2}, 6)});
  const std::vector<std::byte> bytes = tk::io::encode_training_state(m.training_state());
  const fs::path seed = fs::path(TK_SOURCE_DIR) / "fuzz/corpus/fuzz_tkstate/tiny.tkstate";
  if (std::getenv("TK_UPDATE_FIXTURES")) {
    fs::create_directories(seed.parent_path());
    std::ofstream(seed, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::ifstream in(seed, std::ios::binary);
  ASSERT_TRUE(in) << seed << " is missing (run with TK_UPDATE_FIXTURES=1)";
  std::vector<char> stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(stored.size(), bytes.size()) << "the state format changed: run with TK_UPDATE_FIXTURES=1";
  EXPECT_EQ(std::memcmp(stored.data(), bytes.data(), bytes.size()), 0);
}

// ---------------------------------------------------------------- ModelCheckpoint
TEST(ModelCheckpoint, FormatsPathsLikePythonAndSavesBestOnly) {
  const fs::path dir = fresh_dir("ckpt");
  ModelCheckpoint names((dir / "m_{epoch:02d}-{val_loss:.2f}.keras").string());
  tk::Logs logs;
  logs.set("val_loss", 0.12345);
  EXPECT_EQ(names.format_path(4, logs), (dir / "m_05-0.12.keras").string());
  EXPECT_THROW(names.format_path(0,
                                 [] {
                                   tk::Logs l;
                                   l.set("loss", 1.0);
                                   return l;
                                 }()),
               tk::InvalidArgument);  // {val_loss} is not logged
  EXPECT_THROW(ModelCheckpoint("m.h5"), tk::InvalidArgument);
  EXPECT_THROW(ModelCheckpoint("m.keras", {.save_weights_only = true}), tk::InvalidArgument);
  EXPECT_THROW(ModelCheckpoint("m_{epoch:q}.keras"), tk::InvalidArgument);

  // save_best_only over a real fit: a file per improving epoch, and the last file holds the best weights.
  auto m = make_model();
  auto best = std::make_shared<ModelCheckpoint>(
      (dir / "best_{epoch}.weights.h5").string(),
      ModelCheckpointOptions{.monitor = "loss", .save_best_only = true, .save_weights_only = true});
  tk::FitOptions o = fit_options({best});
  o.epochs = 3;
  const tk::History h = m->fit(x_data(), y_data(), o);
  const auto& loss = h.history.at("loss");
  int saved = 0;
  double running = std::numeric_limits<double>::infinity();
  for (size_t e = 0; e < loss.size(); ++e) {
    const bool improved = loss[e] < running;
    running = std::min(running, loss[e]);
    EXPECT_EQ(fs::exists(dir / ("best_" + std::to_string(e + 1) + ".weights.h5")), improved) << "epoch " << e;
    saved += improved ? 1 : 0;
  }
  EXPECT_GE(saved, 1);
  EXPECT_DOUBLE_EQ(best->best(), running);
  fs::remove_all(dir);
}

TEST(ModelCheckpoint, WholeModelFileLoadsBackAndPredictsTheSame) {
  const fs::path dir = fresh_dir("ckpt_model");
  auto m = make_model();
  tk::FitOptions o = fit_options({std::make_shared<ModelCheckpoint>((dir / "last.keras").string())});
  o.epochs = 2;
  m->fit(x_data(), y_data(), o);
  auto back = tk::models::load_model((dir / "last.keras").string());
  const Tensor a = m->predict(x_data()), b = back->predict(x_data());
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  fs::remove_all(dir);
}
