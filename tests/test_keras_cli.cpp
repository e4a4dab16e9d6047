// `trainkit fit --model m.keras --save out.keras`, `trainkit summary m.keras`, `trainkit evaluate m.keras`,
// run as separate processes (TK_CLI_PATH) on the Keras fixtures and a small CSV written here.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "trainkit/io/keras.h"
#include "trainkit/trainkit.h"

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  FILE* p = popen((std::string(TK_CLI_PATH) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string fixture(const std::string& name) { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/" + name; }

class KerasCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tk_keras_cli_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // 32 samples of 784 features in [0, 1) and a label column.
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::ofstream csv(path("data.csv"));
    csv << "label";
    for (int i = 0; i < 784; ++i) csv << ",f" << i;
    csv << "\n";
    x_ = tk::Tensor(tk::Shape{32, 784}, tk::DType::f32);
    y_ = tk::Tensor(tk::Shape{32}, tk::DType::i32);
    for (int r = 0; r < 32; ++r) {
      y_.data<int32_t>()[r] = static_cast<int32_t>(rng() % 10);
      csv << y_.data<int32_t>()[r];
      for (int i = 0; i < 784; ++i) {
        const float v = static_cast<float>(static_cast<int>(u(rng) * 1000)) / 1000.0f;  // exact in the CSV
        x_.data<float>()[r * 784 + i] = v;
        csv << "," << v;
      }
      csv << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
  tk::Tensor x_, y_;
};

TEST_F(KerasCli, FitFromKerasFileResumesAndSaves) {
  CliRun r = run_cli("fit --model " + fixture("mlp.keras") + " --data " + path("data.csv") +
                     " --y label --epochs 1 --batch-size 8 --verbose 2 --no-summary --save " + path("out.keras"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("saved " + path("out.keras")), std::string::npos) << r.out;
  std::unique_ptr<tk::Model> m = tk::models::load_model(path("out.keras"));
  ASSERT_TRUE(m->optimizer());
  EXPECT_EQ(m->optimizer()->iterations(), 2 + 4);  // the file's two steps, then 32 / 8
  EXPECT_EQ(m->losses().at(0).name, "sparse_categorical_crossentropy");
}

// A model file's optimizer (Adam) is kept: an explicit --optimizer of another class is an error, never ignored; the
// same class with --learning-rate trains on with the file's state at the new rate.
TEST_F(KerasCli, AnExplicitOptimizerIsCheckedAgainstTheFilesAndALearningRateApplies) {
  const std::string base = "fit --model " + fixture("mlp.keras") + " --data " + path("data.csv") +
                           " --y label --epochs 1 --batch-size 8 --verbose 0 --no-summary";
  CliRun r = run_cli(base + " --optimizer sgd");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--optimizer sgd: the model file"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("holds a compiled Adam optimizer"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("out.keras")));
  r = run_cli(base + " --optimizer adam -l 0.005 --save " + path("out.keras"));
  ASSERT_EQ(r.status, 0) << r.out;
  std::unique_ptr<tk::Model> m = tk::models::load_model(path("out.keras"));
  EXPECT_EQ(m->optimizer()->name(), "Adam");
  EXPECT_FLOAT_EQ(m->optimizer()->learning_rate(), 0.005f);
  EXPECT_EQ(m->optimizer()->iterations(), 2 + 4);  // the file's state kept
}

TEST_F(KerasCli, SummaryShowsLayersAndCompileConfig) {
  CliRun r = run_cli("summary " + fixture("mlp.keras"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("dense_1 (Dense)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Total params: 235,146"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer Adam (learning_rate 0.001, iterations 2)"), std::string::npos) << r.out;
}

TEST_F(KerasCli, EvaluateMatchesTheApi) {
  CliRun r = run_cli("evaluate " + fixture("mlp.keras") + " --data " + path("data.csv") + " --y label --batch-size 8");
  ASSERT_EQ(r.status, 0) << r.out;
  std::unique_ptr<tk::Model> m = tk::models::load_model(fixture("mlp.keras"));
  tk::Logs logs = m->evaluate(x_, y_, {.batch_size = 8});
  char want[96];
  std::snprintf(want, sizeof want, "loss: %.4f - accuracy: %.4f", logs.get("loss"), logs.get("accuracy"));
  EXPECT_NE(r.out.find(want), std::string::npos) << "want '" << want << "' in:\n" << r.out;
}

// A model file keeps its own dtype policy in `trainkit evaluate` (and fit, predict, plan) unless --dtype-policy is
// given: a mixed_bfloat16 file evaluates as in-process mixed_bfloat16 (its inputs staged as bfloat16), and as float32
// only when asked.
TEST_F(KerasCli, EvaluateKeepsTheFilesDtypePolicyUnlessOneIsGiven) {
  std::unique_ptr<tk::Model> m = tk::models::load_model(fixture("mlp.keras"));
  m->set_dtype_policy("mixed_bfloat16");
  m->save(path("mlp_bf16.keras"));
  auto line = [](const tk::Logs& logs) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "loss: %.4f - accuracy: %.4f", logs.get("loss"), logs.get("accuracy"));
    return std::string(buf);
  };
  std::unique_ptr<tk::Model> bf16 = tk::models::load_model(path("mlp_bf16.keras"));
  const std::string want_bf16 = line(bf16->evaluate(x_, y_, {.batch_size = 8}));
  std::unique_ptr<tk::Model> f32 = tk::models::load_model(path("mlp_bf16.keras"));
  f32->set_dtype_policy("float32");
  const std::string want_f32 = line(f32->evaluate(x_, y_, {.batch_size = 8}));
  const std::string staged = "each batch is converted to bfloat16 as it is staged";
  const std::string cmd = "evaluate " + path("mlp_bf16.keras") + " --data " + path("data.csv") + " --y label -b 8";
  CliRun r = run_cli(cmd);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(want_bf16), std::string::npos) << "want '" << want_bf16 << "' in:\n" << r.out;
  EXPECT_NE(r.out.find(staged), std::string::npos) << "the file's mixed_bfloat16 is kept:\n" << r.out;
  r = run_cli(cmd + " --dtype-policy float32");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(want_f32), std::string::npos) << "want '" << want_f32 << "' in:\n" << r.out;
  EXPECT_EQ(r.out.find(staged), std::string::npos) << "--dtype-policy float32 wins:\n" << r.out;
}

TEST_F(KerasCli, BadFilesAreOneErrorLine) {
  // A truncated .keras: the zip's central directory is gone.
  {
    std::ifstream in(fixture("cnn.keras"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path("cut.keras"), std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  for (const std::string& cmd :
       {"summary " + path("cut.keras"), "evaluate " + path("cut.keras") + " --data " + path("data.csv") + " --y label",
        "fit --model " + path("cut.keras") + " --data " + path("data.csv") + " --y label --epochs 1"}) {
    CliRun r = run_cli(cmd);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("trainkit: error: " + path("cut.keras") + ": not a readable .keras archive"),
              std::string::npos)
        << cmd << "\n"
        << r.out;
  }
  CliRun r = run_cli("fit --model " + fixture("mlp.keras") + " --save " + path("x.h5") + " --epochs 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("trainkit: error: --save " + path("x.h5") + ": the path must end in .keras"), std::string::npos)
      << r.out;
  r = run_cli("summary " + path("missing.keras"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}

}  // namespace
