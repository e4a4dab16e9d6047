#include "dataset.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "arrays.h"
#include "trainkit/data/dataset.h"

namespace tkpy {

using namespace nb::literals;
using tk::data::Dataset;

namespace {

// One pass over a dataset, element by element, as tuples of NumPy arrays (copies: an element may be a view of the
// source arrays, which the pass does not keep alive). The next element is produced with the GIL released.
class PyIterator {
 public:
  explicit PyIterator(const Dataset& d) : it_(d.iterator()) {}
  nb::tuple next() {
    tk::data::Element e;
    bool more = false;
    {
      nb::gil_scoped_release release;
      more = it_.next(e);
    }
    if (!more) throw nb::stop_iteration();
    nb::list out;
    for (const tk::Tensor& t : e) out.append(to_numpy(t.clone()));
    return nb::tuple(out);
  }

 private:
  tk::data::Iterator it_;
};

}  // namespace

void register_dataset(nb::module_& m) {
  m.attr("DATA_AUTOTUNE") = tk::data::AUTOTUNE;
  m.attr("INFINITE_CARDINALITY") = tk::data::kInfiniteCardinality;
  m.attr("UNKNOWN_CARDINALITY") = tk::data::kUnknownCardinality;
  nb::class_<PyIterator>(m, "DatasetIterator")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyIterator::next);
  nb::class_<Dataset>(m, "Dataset", "A tk::data::Dataset (use trainkit.data.Dataset, which keeps its arrays alive).")
      .def_static(
          "from_tensor_slices",
          [](const std::vector<HostArray>& arrays) {
            return Dataset::from_tensor_slices(tensor_views(arrays, "Dataset.from_tensor_slices"));
          },
          "arrays"_a)
      .def("shuffle", &Dataset::shuffle, "buffer_size"_a, "seed"_a, "reshuffle_each_iteration"_a)
      .def("batch", &Dataset::batch, "batch_size"_a, "drop_remainder"_a)
      .def("prefetch", &Dataset::prefetch, "buffer_size"_a)
      .def("repeat", &Dataset::repeat, "count"_a)
      .def("take", &Dataset::take, "count"_a)
      .def("skip", &Dataset::skip, "count"_a)
      .def("cache", &Dataset::cache, "filename"_a)
      .def("shard", &Dataset::shard, "num_shards"_a, "index"_a)
      .def("unbatch", &Dataset::unbatch)
      .def("cardinality", &Dataset::cardinality)
      .def("describe", &Dataset::describe)
      .def("iterator", [](const Dataset& d) { return std::make_unique<PyIterator>(d); });
}

}  // namespace tkpy
