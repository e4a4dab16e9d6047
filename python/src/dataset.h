// tk.data.Dataset (python/trainkit/data.py) over tk::data::Dataset: from_tensor_slices on NumPy arrays in place (the
// Python wrapper keeps the arrays alive as long as any dataset made from them), and the transformations that need no
// Python code (shuffle, batch, prefetch, repeat, take, skip, cache, shard). A Python-callback map is not bound: it
// would take the GIL for every element on the pipeline's threads.
#pragma once
#include <nanobind/nanobind.h>

namespace tkpy {

namespace nb = nanobind;

void register_dataset(nb::module_& m);

}  // namespace tkpy
