// `trainkit devices` and `trainkit smi`, run as separate processes (TK_CLI_PATH): exit codes and output with
// and without a GPU. Whether this machine has one is decided in-process by the same discovery the CLI uses.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/cuda_device.h"

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(contains((haystack), (needle))) << "expected to find \"" << (needle) << "\" in:\n" << (haystack)

struct Result {
  int code = -1;  // exit status; -1 when killed by a signal
  std::string out, err;
};

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// `env` is a prefix of VAR=value words ("" for none).
Result run_cli(const std::string& env, const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::path(::testing::TempDir());
  const std::string base = "tk_cli_devices_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  const std::string out = (dir / (base + ".out")).string(), err = (dir / (base + ".err")).string();
  const std::string cmd = "env " + env + " '" TK_CLI_PATH "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

std::string describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout:\n" + r.out + "--- stderr:\n" + r.err;
}

bool have_gpu() { return !tk::runtime::cuda_devices().devices.empty(); }
const std::string& reason() { return tk::runtime::cuda_devices().reason; }

TEST(CliDevices, ListsTheCpuWithItsBudgetAndExitsZero) {
  const Result r = run_cli("", "devices");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_TRUE(r.out.rfind("cpu:0 ", 0) == 0) << "the cpu comes first:\n" << r.out;
  EXPECT_CONTAINS(r.out, "| budget ");
  EXPECT_CONTAINS(r.out, "(physical memory, growth)");
  EXPECT_CONTAINS(r.out, "CUDA backend: ");
  EXPECT_CONTAINS(r.out, "NVML");
  EXPECT_EQ(r.err, "") << describe(r);
}

// The CUDA line names cuDNN's state (src/backends/cuda/cudnn_loader.h): off by TK_CUDNN=0, or why it cannot load.
TEST(CliDevices, TheCudaLineSaysWhetherCudnnIsUsed) {
  if (!tk::runtime::cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  const Result off = run_cli("TK_CUDNN=0", "devices");
  ASSERT_EQ(off.code, 0) << describe(off);
  const Result missing = run_cli("TK_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9", "devices");
  ASSERT_EQ(missing.code, 0) << describe(missing);
  if (contains(off.out, "cuDNN: built without cuDNN headers")) GTEST_SKIP() << "built without cudnn.h";
  EXPECT_CONTAINS(off.out, "; cuDNN not used (TK_CUDNN=0); ");
  EXPECT_CONTAINS(missing.out, "; cuDNN not available: /nonexistent/libcudnn.so.9");
}

TEST(CliDevices, WithoutAGpuSaysWhy) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA device";
  const Result r = run_cli("", "devices");
  ASSERT_EQ(r.code, 0) << "no GPU is not an error:\n" << describe(r);
  EXPECT_CONTAINS(r.out, "no CUDA device: " + reason());
  EXPECT_FALSE(contains(r.out, "cuda:0")) << r.out;
  if (tk::runtime::cuda_built()) {
    EXPECT_CONTAINS(r.out, "CUDA backend: built, CUDA runtime ");
  } else {
    EXPECT_CONTAINS(r.out, "CUDA backend: not built");
    EXPECT_CONTAINS(r.out, "this build has no CUDA backend");
  }
}

TEST(CliDevices, WithAGpuPrintsTheDeviceLine) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << reason();
  const Result r = run_cli("", "devices");
  ASSERT_EQ(r.code, 0) << describe(r);
  const tk::DeviceInfo& d = tk::runtime::cuda_device(0).info;
  EXPECT_CONTAINS(r.out, "cuda:0  " + d.name);
  EXPECT_CONTAINS(r.out, "uuid " + d.uuid);
  EXPECT_CONTAINS(r.out, "pci bus id " + d.pci_bus_id);
  EXPECT_CONTAINS(r.out, "compute capability " + std::to_string(d.compute_capability_major) + "." +
                             std::to_string(d.compute_capability_minor));
  EXPECT_CONTAINS(r.out, "system reserve");
  const Result hidden = run_cli("TK_VISIBLE_DEVICES=-1", "devices");
  ASSERT_EQ(hidden.code, 0) << describe(hidden);
  EXPECT_FALSE(contains(hidden.out, "cuda:0")) << hidden.out;
  EXPECT_CONTAINS(hidden.out, "no CUDA device: TK_VISIBLE_DEVICES=-1 hides all");
  const Result fraction = run_cli("TK_MEMORY_FRACTION=0.45", "devices");
  ASSERT_EQ(fraction.code, 0) << describe(fraction);
  EXPECT_CONTAINS(fraction.out, "(TK_MEMORY_FRACTION=0.45, growth) | uuid");
}

TEST(CliDevices, VisibleDevicesVariablesAreHonouredOrExplained) {
  const Result none = run_cli("TK_VISIBLE_DEVICES=-1", "devices");
  ASSERT_EQ(none.code, 0) << describe(none);
  EXPECT_FALSE(contains(none.out, "cuda:")) << none.out;
  const Result gpu = run_cli("CUDA_VISIBLE_DEVICES=0", "devices");
  ASSERT_EQ(gpu.code, 0) << describe(gpu);
  if (!tk::runtime::cuda_built())
    EXPECT_CONTAINS(gpu.err, "CUDA_VISIBLE_DEVICES=0 names GPUs, but this build has no CUDA backend");
  else
    EXPECT_EQ(gpu.err, "") << "the CUDA runtime applies CUDA_VISIBLE_DEVICES itself";
}

TEST(CliDevices, ABadBudgetVariableIsARealError) {
  const Result r = run_cli("TK_MEMORY_FRACTION=2", "devices");
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_CONTAINS(r.err, "trainkit: error: TK_MEMORY_FRACTION='2' must be a number in (0, 1]");
}

TEST(CliSmi, WithoutAGpuSaysSoAndShowsTheCpuBudget) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA device";
  const Result r = run_cli("", "smi");
  ASSERT_EQ(r.code, 0) << "no GPU is not an error:\n" << describe(r);
  EXPECT_CONTAINS(r.out, "trainkit smi  ");
  EXPECT_CONTAINS(r.out, "no GPU: ");
  EXPECT_CONTAINS(r.out, "cpu:0 ");
  EXPECT_CONTAINS(r.out, "| budget ");
  EXPECT_CONTAINS(r.out, "in use by this process");
  EXPECT_EQ(r.err, "") << describe(r);
}

TEST(CliSmi, WithoutNvmlItStillWorks) {
  const Result r = run_cli("TK_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", "smi");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "NVML not available (no NVIDIA driver): /nonexistent/libnvidia-ml.so.1");
  if (have_gpu())
    EXPECT_CONTAINS(r.out, "(cudaMemGetInfo)") << "CUDA devices are shown from the CUDA runtime";
  else
    EXPECT_CONTAINS(r.out, "no GPU: " + reason());
  EXPECT_CONTAINS(r.out, "cpu:0 ");
}

TEST(CliSmi, WithAGpuShowsUtilizationAndMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: " << reason();
  const Result r = run_cli("", "smi");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "GPU 0 ");
  EXPECT_CONTAINS(r.out, "cuda:0");
  EXPECT_CONTAINS(r.out, " used");
}

TEST(CliSmi, WatchRepeatsAndCountStops) {
  const Result r = run_cli("", "smi --watch 0.05 --count 3");
  ASSERT_EQ(r.code, 0) << describe(r);
  size_t reports = 0;
  for (size_t p = 0; (p = r.out.find("trainkit smi  ", p)) != std::string::npos; ++p) ++reports;
  EXPECT_EQ(reports, 3u) << r.out;
}

TEST(CliSmi, BadOptionsAreOneClearError) {
  for (const char* args : {"smi --watch -1", "smi --count 2", "smi --count -1 --watch 1"}) {
    const Result r = run_cli("", args);
    EXPECT_EQ(r.code, 1) << args << "\n" << describe(r);
    EXPECT_TRUE(r.err.rfind("trainkit: error: --", 0) == 0) << args << "\n" << describe(r);
    EXPECT_EQ(r.out, "") << args;
  }
}

// `trainkit fit --replicas N --device cuda`: one replica per GPU from cuda:0 (MirroredStrategy over NCCL). Where
// there are fewer GPUs than replicas it is one clear error naming the missing one (or the missing CUDA device), never a
// run on fewer GPUs or on the cpu.
TEST(CliDevices, ReplicasOnCudaTakeOneGpuEach) {
  const size_t gpus = tk::runtime::cuda_devices().devices.size();
  const Result r = run_cli("", "fit --replicas 2 --device cuda --epochs 1 -v 2 --no-summary");
  if (gpus >= 2) {
    ASSERT_EQ(r.code, 0) << describe(r);
    EXPECT_CONTAINS(r.out + r.err, "MirroredStrategy over cuda:0, cuda:1");
    return;
  }
  EXPECT_NE(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.err, gpus == 1 ? "cuda:1" : "cuda");
  EXPECT_FALSE(contains(r.out, "test_accuracy")) << "it must not train elsewhere:\n" << describe(r);
}

TEST(CliDevices, HelpListsTheNewCommands) {
  const Result r = run_cli("", "--help");
  ASSERT_EQ(r.code, 0) << describe(r);
  EXPECT_CONTAINS(r.out, "devices");
  EXPECT_CONTAINS(r.out, "smi");
}

}  // namespace
