// tk::isolated_fit: the model and data out to a temporary folder, `trainkit fit` in a child, weights and History back.
#include "trainkit/nn/isolated_fit.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/isolate.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"
#include "trainkit/data/npy.h"
#include "trainkit/io/keras.h"

namespace tk {
namespace fs = std::filesystem;
namespace {

// $TK_TRAINKIT, `trainkit` beside this executable, or `trainkit` on PATH (run_child looks it up).
std::string trainkit_cli() {
  if (std::optional<std::string> env = runtime::setting_text(runtime::Setting::trainkit)) return *env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "trainkit";
    if (fs::is_regular_file(beside, ec) && ::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  return "trainkit";
}

// A folder of our own, removed with everything in it when the fit returns or throws.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tk_isolated_fit.XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw IoError("isolated_fit: cannot create a temporary folder in " + fs::temp_directory_path().string());
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

History read_history(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw Error("isolated_fit: the child ended without writing its History (" + file.string() + ")");
  History h;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    h.epoch = j.at("epoch").get<std::vector<int>>();
    for (const auto& [k, v] : j.at("history").items()) h.history[k] = v.get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw FormatError("isolated_fit: the child's History " + file.string() +
                      " is not what trainkit writes: " + e.what());
  }
  return h;
}

}  // namespace

History isolated_fit(Model& model, const Tensor& x, const Tensor& y, IsolatedFitOptions o) {
  if (!model.optimizer())
    throw InvalidArgument("isolated_fit: compile the model first (the child trains what it was compiled with)");
  if (o.epochs < 0 || o.batch_size <= 0)
    throw InvalidArgument("isolated_fit: epochs must be >= 0 and batch_size > 0, got " + std::to_string(o.epochs) +
                          " and " + std::to_string(o.batch_size));
  TempDir dir;
  const fs::path in = dir.path / "model.keras", out = dir.path / "trained.keras", hist = dir.path / "history.json";
  model.save(in.string());
  data::save_npy((dir.path / "x.npy").string(), x);
  data::save_npy((dir.path / "y.npy").string(), y);
  std::vector<std::string> argv{trainkit_cli(), "fit",
                                "--model",      in.string(),
                                "--data",       (dir.path / "x.npy").string(),
                                "--y",          (dir.path / "y.npy").string(),
                                "--epochs",     std::to_string(o.epochs),
                                "--batch-size", std::to_string(o.batch_size),
                                "--seed",       std::to_string(o.seed),
                                "--device",     o.device,
                                "-v",           std::to_string(o.verbose),
                                "--no-summary", "--save",
                                out.string(),   "--history-json",
                                hist.string()};
  if (!o.memory_limit.empty()) argv.insert(argv.end(), {"--memory-limit", o.memory_limit});
  if (o.validation_data) {
    const std::string vx = (dir.path / "vx.npy").string(), vy = (dir.path / "vy.npy").string();
    data::save_npy(vx, o.validation_data->first);
    data::save_npy(vy, o.validation_data->second);
    argv.insert(argv.end(), {"--validation-data", vx, "--validation-y", vy});
  }
  const runtime::ChildResult r = runtime::run_child(argv, {}, o.verbose != 0);
  if (!r.ok()) {
    bool oom = !r.exited && r.signal == 9;  // the kernel's OOM killer sends SIGKILL
    for (const std::string& l : r.last_lines)
      oom = oom || l.find("trainkit: error: OOM") != std::string::npos || l.find("out of memory") != std::string::npos;
    const std::string message = "isolated_fit: " + r.describe("trainkit fit");  // with the child's last lines
    if (oom) throw OutOfMemoryError(message);
    throw Error(message);
  }
  History h = read_history(hist);
  model.load_weights(out.string());  // weights and the optimizer state the child ended with
  return h;
}

}  // namespace tk
