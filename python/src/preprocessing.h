// Preprocessing layers' state computed from data: Normalization.adapt (trainkit/layers.py), run by the C++ API's
// tk::layers::adapt on an array in place or on a tk.data.Dataset's batches, without the GIL.
#pragma once
#include <nanobind/nanobind.h>

namespace tkpy {

namespace nb = nanobind;

void register_preprocessing(nb::module_& m);

}  // namespace tkpy
