// tk.data.Dataset (python/trainkit/data.py) over tk::data::Dataset: from_tensor_slices on NumPy arrays in place (the
// Python wrapper keeps the arrays alive as long as any dataset made from them), the transformations (shuffle, batch,
// prefetch, repeat, take, skip, cache, shard, unbatch), and map with a Python function, which the C++ pipeline calls
// on its threads, taking the GIL for each call (dataset.cpp, map_python).
#pragma once
#include <nanobind/nanobind.h>

namespace tkpy {

namespace nb = nanobind;

void register_dataset(nb::module_& m);

}  // namespace tkpy
