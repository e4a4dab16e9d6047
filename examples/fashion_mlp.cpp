// Fashion-MNIST with a Keras-style MLP: the whole library API in one page.
// Build: cmake --build build --target fashion_mlp && ./build/fashion_mlp
// Or as an outside project, against an installed trainkit: see examples/CMakeLists.txt.
#include <trainkit/trainkit.h>

#include <algorithm>
#include <cstdio>

int main() try {
  using namespace tk::layers;
  tk::utils::set_random_seed(42);

  tk::data::FashionMnist data = tk::data::load_fashion_mnist();  // Debian's dataset-fashion-mnist

  tk::Sequential model({Input({28, 28}), Flatten(), Dense(256, "relu"), Dense(128, "relu"), Dense(10)});
  model.compile(tk::optimizers::Adam({.learning_rate = 1e-3f}),
                tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  model.summary();

  tk::History history =
      model.fit(data.x_train, data.y_train, {.batch_size = 128, .epochs = 10, .validation_split = 0.1f});

  tk::Logs test = model.evaluate(data.x_test, data.y_test, {.batch_size = 1000});
  std::printf("test loss %.4f - test accuracy %.4f (best val_accuracy %.4f)\n", test.get("loss"), test.get("accuracy"),
              *std::max_element(history.history["val_accuracy"].begin(), history.history["val_accuracy"].end()));

  tk::Tensor logits = model.predict(data.x_test.slice_rows(0, 5));  // (5, 10)
  std::printf("first prediction: %s\n", logits.to_string(10).c_str());
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
