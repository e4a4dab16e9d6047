// The writers through the command line: `trainkit fit --tensorboard DIR` and `trainkit plan --svg FILE`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "trainkit/data/tfrecord.h"

namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tk_writers_cli_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

int run(const std::string& args, const fs::path& dir) {
  const std::string cmd = std::string(TK_CLI_PATH) + " " + args + " >" + (dir / "out.txt").string() + " 2>" +
                          (dir / "err.txt").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int records_in(const fs::path& run_dir) {
  int files = 0, records = 0;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().rfind("events.out.tfevents.", 0), 0u) << e.path();
    tk::data::TFRecordReader r(e.path().string());
    for (std::string rec; r.next(rec);) ++records;
  }
  EXPECT_EQ(files, 1);
  return records;
}

TEST(WritersCli, FitTensorboardWritesTrainAndValidationRuns) {
  const fs::path dir = scratch("tb");
  {
    std::ofstream csv(dir / "d.csv");
    csv << "a,b,c,label\n";
    for (int i = 0; i < 24; ++i)
      csv << (i % 5) * 0.1 << "," << (i % 3) * 0.2 << "," << (i % 7) * 0.05 << "," << i % 2 << "\n";
  }
  const fs::path csv = dir / "d.csv";
  const std::string args = "fit -v 0 --model dense:4:relu,dense:2 -e 2 -b 8 --data " + csv.string() +
                           " --y label --validation-data " + csv.string() + " --tensorboard " + (dir / "logs").string();
  ASSERT_EQ(run(args, dir), 0) << read_text(dir / "err.txt");
  // file_version + per epoch: loss, accuracy, learning rate, memory in use and peak (+ input wait values).
  EXPECT_GE(records_in(dir / "logs" / "train"), 1 + 2 * 5);
  EXPECT_EQ(records_in(dir / "logs" / "validation"), 1 + 2 * 2);  // file_version + val loss, val accuracy
  // fit on a Dataset reports the input wait, and it reaches TensorBoard with the memory scalars.
  std::string train_bytes;
  for (const auto& e : fs::directory_iterator(dir / "logs" / "train")) train_bytes = read_text(e.path());
  for (const char* tag : {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "epoch_input_wait_fraction",
                          "epoch_memory_in_use_mib", "epoch_memory_peak_mib"})
    EXPECT_NE(train_bytes.find(tag), std::string::npos) << tag;
  fs::remove_all(dir);
}

TEST(WritersCli, FitTensorboardIntoAFileIsOneClearError) {
  const fs::path dir = scratch("tb_bad");
  std::ofstream(dir / "taken") << "x";
  std::ofstream csv(dir / "d.csv");
  csv << "a,label\n0.5,1\n0.25,0\n";
  csv.close();
  const int code = run("fit -v 0 --model dense:2 -e 1 -b 2 --data " + (dir / "d.csv").string() +
                           " --y label --tensorboard " + (dir / "taken").string(),
                       dir);
  EXPECT_EQ(code, 1);
  const std::string err = read_text(dir / "err.txt");
  EXPECT_EQ(err.rfind("trainkit: error: TensorBoard: cannot create the log folder", 0), 0u) << err;
  EXPECT_NE(err.find((dir / "taken").string()), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(WritersCli, PlanSvgWritesThePicture) {
  const fs::path dir = scratch("svg");
  ASSERT_EQ(run("plan --model cnn --batch-size 8 --svg " + (dir / "plan.svg").string(), dir), 0)
      << read_text(dir / "err.txt");
  const std::string svg = read_text(dir / "plan.svg");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"peak\""), std::string::npos);
  EXPECT_NE(read_text(dir / "out.txt").find("Wrote the plan's picture to"), std::string::npos);
  EXPECT_EQ(run("plan --model cnn --batch-size 8 --svg " + (dir / "missing" / "plan.svg").string(), dir), 1);
  EXPECT_EQ(read_text(dir / "err.txt").rfind("trainkit: error: ", 0), 0u);
  fs::remove_all(dir);
}

TEST(WritersCli, ExportWritesAnOnnxModel) {
  const fs::path dir = scratch("onnx");
  const fs::path out = dir / "m.onnx";
  ASSERT_EQ(run("export dense:16:relu,dense:10 " + out.string(), dir), 0) << read_text(dir / "err.txt");
  const std::string bytes = read_text(out);
  ASSERT_GT(bytes.size(), 4u * (28 * 28 * 16 + 16 * 10));                                // the weights are in it
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x08\x08", 2));                             // ModelProto.ir_version = 8
  EXPECT_NE(bytes.find(std::string("\x42\x04\x0a\x00\x10\x11", 6)), std::string::npos);  // opset_import {"", 17}
  EXPECT_NE(read_text(dir / "out.txt").find("Wrote " + out.string()), std::string::npos);
  EXPECT_EQ(run("export cnn " + (dir / "m.txt").string(), dir), 1);
  EXPECT_NE(read_text(dir / "err.txt").find("trainkit: error: export: the output file must end in .onnx"),
            std::string::npos);
  EXPECT_EQ(run("export dense:x " + out.string(), dir), 1);
  EXPECT_EQ(read_text(dir / "err.txt").rfind("trainkit: error: ", 0), 0u);
  fs::remove_all(dir);
}

}  // namespace
