#include "dataset.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "arrays.h"
#include "trainkit/core/error.h"
#include "trainkit/data/dataset.h"

namespace tkpy {

using namespace nb::literals;
using tk::data::Dataset;

namespace {

// One pass over a dataset, element by element, as tuples of NumPy arrays (copies: an element may be a view of the
// source arrays, which the pass does not keep alive). The next element is produced with the GIL released.
class PyIterator {
 public:
  // Started and destroyed without the GIL: a pass's threads may be waiting for it (a Python map function), and
  // destroying the pass joins them.
  explicit PyIterator(const Dataset& d) {
    nb::gil_scoped_release release;
    it_ = d.iterator();
  }
  ~PyIterator() {
    nb::gil_scoped_release release;
    it_ = tk::data::Iterator();
  }
  PyIterator(const PyIterator&) = delete;
  PyIterator& operator=(const PyIterator&) = delete;
  // Stops the pass (its threads joined), for trainkit.data's exit hook: a pass still running when the interpreter
  // finalizes would have threads blocked on the GIL, which Python then ends abruptly.
  void close() {
    nb::gil_scoped_release release;
    it_ = tk::data::Iterator();
    closed_ = true;
  }
  nb::tuple next() {
    if (closed_) throw nb::stop_iteration();
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
  bool closed_ = false;
};

// Whether Python is shutting down: a pipeline thread must not wait for the GIL then (Python ends such threads).
bool interpreter_exiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return !nb::is_alive() || Py_IsFinalizing();
#else
  return !nb::is_alive() || _Py_IsFinalizing();
#endif
}

// Dataset.map with a Python function, called by the C++ pipeline on its threads (or, with num_parallel_calls 0, on the
// thread that asks for the next element), the GIL taken for each call. `fn` is trainkit/data.py's wrapper of the
// user's function: it takes the element's components as NumPy arrays (read-only views, no copy) and returns a tuple
// of C-contiguous arrays of dtypes trainkit reads, which become the new element without a copy (each tensor keeps its
// array alive). An exception raised in the function is a nb::python_error holding the Python exception: the pipeline
// carries it to the consumer (Iterator::next rethrows it), and nanobind raises it there unchanged — the same type,
// message and traceback.
// `fn` is borrowed: the Python Dataset made by map, and every one derived from it, holds it (Dataset._fns), and a pass
// runs only while its Python Dataset is alive (iteration, fit, evaluate, predict and adapt hold it). A reference held
// here instead would close an uncollectable cycle whenever the function refers to the dataset (a top-level lambda
// refers to its module, which holds the dataset): Python's collector cannot see references held by C++.
Dataset map_python(const Dataset& d, nb::handle fn, nb::object keep, int64_t num_parallel_calls, bool deterministic,
                   const std::string& name) {
  PyObject* f = fn.ptr();
  SharedObject arrays = share(std::move(keep));
  auto call = [f, arrays](tk::data::Element e) {
    if (interpreter_exiting()) throw tk::Error("Dataset.map: the Python interpreter is exiting");
    nb::gil_scoped_acquire gil;
    nb::object args = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(e.size())));
    if (!args.is_valid()) throw nb::python_error();
    for (size_t i = 0; i < e.size(); ++i)
      PyTuple_SET_ITEM(args.ptr(), static_cast<Py_ssize_t>(i), readonly_numpy(e[i], arrays).release().ptr());
    e.clear();  // the views hold the storage; drop the rest now, with the GIL held
    const nb::object result = nb::steal(PyObject_CallObject(f, args.ptr()));
    if (!result.is_valid()) throw nb::python_error();  // the function raised: carried to the consumer as it is
    const nb::tuple components = nb::cast<nb::tuple>(result);
    tk::data::Element out;
    for (size_t i = 0; i < components.size(); ++i)
      out.push_back(owning_tensor_view(nb::cast<HostArray>(components[i]), nb::borrow(components[i]), "Dataset.map"));
    return out;
  };
  return d.map(call, {.num_parallel_calls = num_parallel_calls, .deterministic = deterministic, .name = name});
}

}  // namespace

void register_dataset(nb::module_& m) {
  m.attr("DATA_AUTOTUNE") = tk::data::AUTOTUNE;
  m.attr("INFINITE_CARDINALITY") = tk::data::kInfiniteCardinality;
  m.attr("UNKNOWN_CARDINALITY") = tk::data::kUnknownCardinality;
  nb::class_<PyIterator>(m, "DatasetIterator", nb::is_weak_referenceable())
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyIterator::next)
      .def("close", &PyIterator::close);
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
      .def("map", &map_python, "fn"_a, "keep"_a, "num_parallel_calls"_a, "deterministic"_a, "name"_a)
      .def("cardinality", &Dataset::cardinality)
      .def("describe", &Dataset::describe)
      .def("iterator", [](const Dataset& d) { return std::make_unique<PyIterator>(d); });
}

}  // namespace tkpy
