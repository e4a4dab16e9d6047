// The C++ file readers as tk.data sources (python/trainkit/data.py): NumPy .npz archives (load_npz) and CSV files
// (open_csv: tf.data.experimental.CsvDataset), read on the pipeline's threads without the GIL.
#pragma once
#include <nanobind/nanobind.h>

namespace tkpy {

namespace nb = nanobind;

void register_readers(nb::module_& m);

}  // namespace tkpy
