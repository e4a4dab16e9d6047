// The byte-level causal LSTM language model of bench/peers/keras_bytelm.py in trainkit: the same Keras-made
// initial model file, the same text cut by Dataset::from_text_file (x = bytes[s, s+T), y = the next bytes), the
// same train / validation split (the last 10% of the sequences), batch size and epochs. One JSON line per epoch
// (bench/bytelm.sh runs both).
//
//   build/bench/tk_bench_bytelm DIR [--epochs 3] [--t 64] [--batch 32]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "trainkit/data/dataset.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/model.h"

namespace {

class EpochLine : public tk::Callback {
 public:
  EpochLine(int64_t steps, int64_t n_train, int64_t n_val) : steps_(steps), n_train_(n_train), n_val_(n_val) {}
  void on_epoch_begin(int, const tk::Logs&) override { t0_ = std::chrono::steady_clock::now(); }
  void on_epoch_end(int epoch, const tk::Logs& logs) override {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::printf(
        "{\"peer\": \"trainkit\", \"epoch\": %d, \"steps\": %lld, \"sequences\": [%lld, %lld], \"loss\": %.6f, "
        "\"val_loss\": %.6f, \"epoch_s\": %.2f}\n",
        epoch + 1, static_cast<long long>(steps_ * (epoch + 1)), static_cast<long long>(n_train_),
        static_cast<long long>(n_val_), logs.get("loss"), logs.get("val_loss"), s);
    std::fflush(stdout);
  }

 private:
  int64_t steps_, n_train_, n_val_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--epochs N] [--t T] [--batch B]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int epochs = 3;
  int64_t t = 64, batch = 32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--epochs") epochs = std::atoi(argv[i + 1]);
    if (a == "--t") t = std::atol(argv[i + 1]);
    if (a == "--batch") batch = std::atol(argv[i + 1]);
  }
  try {
    std::unique_ptr<tk::Model> model = tk::models::load_model(dir + "/initial.keras");
    using tk::data::Dataset;
    const Dataset text = Dataset::from_text_file(dir + "/text.txt", t);  // (x (T,), y (T,)) int32
    const int64_t n = text.cardinality();
    const int64_t n_train = n - n / 10;
    const Dataset train = text.take(n_train).shuffle(n_train, /*seed=*/1).batch(batch);
    const Dataset val = text.skip(n_train).batch(batch);
    tk::FitOptions o;
    o.epochs = epochs;
    o.verbose = 0;
    o.validation_dataset = val;
    o.callbacks = {std::make_shared<EpochLine>((n_train + batch - 1) / batch, n_train, n - n_train)};
    model->fit(train, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tk_bench_bytelm: %s\n", e.what());
    return 1;
  }
  return 0;
}
