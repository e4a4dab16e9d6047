#include "preprocessing.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <vector>

#include "arrays.h"
#include "trainkit/nn/adapt.h"
#include "trainkit/nn/layers.h"

namespace tkpy {

using namespace nb::literals;

namespace {

// Keras' Normalization(axis=...).adapt(data) on a fresh C++ layer: (mean, variance) of the kept axes' shape (count
// stays 0, as Keras 3 leaves it). The Python layer holds them until a model that has it is built.
template <typename Data>
nb::tuple adapt_normalization(const std::vector<int>& axis, const std::string& name, const Data& data) {
  tk::LayerPtr layer = tk::layers::Normalization({.axis = axis, .name = name});
  {
    nb::gil_scoped_release release;  // a dataset's pass may call Python (map) on its threads
    tk::layers::adapt(layer, data);
  }
  return nb::make_tuple(to_numpy(layer->weights()[0].value.clone()), to_numpy(layer->weights()[1].value.clone()));
}

}  // namespace

void register_preprocessing(nb::module_& m) {
  m.def(
      "normalization_adapt",
      [](const std::vector<int>& axis, const std::string& name, const HostArray& data) {
        return adapt_normalization(axis, name, tensor_view(data, "Normalization.adapt"));
      },
      "axis"_a, "name"_a, "data"_a);
  m.def(
      "normalization_adapt",
      [](const std::vector<int>& axis, const std::string& name, const tk::data::Dataset& batches) {
        return adapt_normalization(axis, name, batches);
      },
      "axis"_a, "name"_a, "batches"_a);
}

}  // namespace tkpy
