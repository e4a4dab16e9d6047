// CLI subcommands.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace tk::cli {

struct FitArgs {
  std::string model = "dense:256:relu,dense:128:relu,dense:10";
  int epochs = 10;
  int64_t batch_size = 128;
  float learning_rate = 1e-3f;
  std::string optimizer = "adam";
  uint64_t seed = 42;
  std::string data_dir;  // default: tk::data::default_fashion_mnist_dir()
  std::string train_images, train_labels, test_images, test_labels;
  float validation_split = 0.0f;
  int verbose = -1;
  bool summary = true;
};

void add_fit_command(CLI::App& app, FitArgs& args);
int run_fit(const FitArgs& args);

}  // namespace tk::cli
