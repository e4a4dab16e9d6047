// The adding problem (T = 100) in trainkit, from the files bench/peers/keras_adding.py writes: the Keras-made model
// (initial weights, Adam and MSE from its compile config) trained on the same arrays with the same batch size and
// epochs. Prints one JSON line per epoch, as the Keras peer does (bench/adding_problem.sh runs both).
//
//   build/bench/tk_bench_adding DIR [--epochs 30] [--batch 64]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "trainkit/data/npy.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/model.h"

namespace {

class EpochLine : public tk::Callback {
 public:
  void on_epoch_begin(int, const tk::Logs&) override { t0_ = std::chrono::steady_clock::now(); }
  void on_epoch_end(int epoch, const tk::Logs& logs) override {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::printf("{\"peer\": \"trainkit\", \"epoch\": %d, \"loss\": %.6f, \"val_loss\": %.6f, \"epoch_s\": %.2f}\n",
                epoch + 1, logs.get("loss"), logs.get("val_loss"), s);
    std::fflush(stdout);
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--epochs N] [--batch B]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int epochs = 30;
  int64_t batch = 64;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--epochs") epochs = std::atoi(argv[i + 1]);
    if (a == "--batch") batch = std::atol(argv[i + 1]);
  }
  try {
    std::unique_ptr<tk::Model> model = tk::models::load_model(dir + "/initial.keras");
    const tk::Tensor x = tk::data::load_npy(dir + "/x_train.npy");  // (N, T, 2)
    const tk::Tensor y = tk::data::load_npy(dir + "/y_train.npy");  // (N, 1)
    const tk::Tensor xv = tk::data::load_npy(dir + "/x_val.npy");
    const tk::Tensor yv = tk::data::load_npy(dir + "/y_val.npy");
    tk::FitOptions o;
    o.batch_size = batch;
    o.epochs = epochs;
    o.verbose = 0;
    o.seed = 1;
    o.validation_data = std::make_pair(std::vector<tk::Tensor>{xv}, std::vector<tk::Tensor>{yv});
    o.callbacks = {std::make_shared<EpochLine>()};
    model->fit(x, y, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tk_bench_adding: %s\n", e.what());
    return 1;
  }
  return 0;
}
