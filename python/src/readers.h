// The C++ file readers for Python: NumPy .npz archives (load_npz) and CSV files (open_csv:
// tf.data.experimental.CsvDataset, read on the pipeline's threads) in python/trainkit/data.py, and the Fashion-MNIST
// IDX files (load_fashion_mnist: keras.datasets.fashion_mnist) in python/trainkit/datasets.py; without the GIL.
#pragma once
#include <nanobind/nanobind.h>

namespace tkpy {

namespace nb = nanobind;

void register_readers(nb::module_& m);

}  // namespace tkpy
