#include "readers.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "trainkit/core/error.h"
#include "trainkit/data/csv.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/idx.h"
#include "trainkit/data/npy.h"

namespace tkpy {

using namespace nb::literals;
using tk::data::Dataset;

namespace {

// (name, dtype name, default or None) per column, as data.py's CsvDataset builds them from tf's record_defaults.
using CsvColumnSpec = std::tuple<std::string, std::string, std::optional<double>>;

tk::data::CsvOptions csv_options(const std::vector<CsvColumnSpec>& columns, bool header, const std::string& delimiter,
                                 const std::vector<std::string>& select) {
  if (delimiter.size() != 1) throw tk::InvalidArgument("CsvDataset: field_delim must be one character");
  tk::data::CsvOptions o;
  for (const auto& [name, dtype, value] : columns) o.columns.push_back({name, tk::dtype_from_name(dtype), value});
  o.header = header;
  o.delimiter = delimiter[0];
  o.select = select;
  return o;
}

// Elements: one scalar per selected column, file after file in order. Every file's header and the options are checked
// here (open_csv reads the header), so a bad file or column is an error when the dataset is made, not mid-fit.
Dataset csv_dataset(const std::vector<std::string>& files, const std::vector<CsvColumnSpec>& columns, bool header,
                    const std::string& delimiter, const std::vector<std::string>& select) {
  const tk::data::CsvOptions o = csv_options(columns, header, delimiter, select);
  for (const std::string& f : files) (void)tk::data::open_csv(f, o);
  auto one = [o](const std::string& f) {
    return Dataset::from_reader([f, o] { return tk::data::open_csv(f, o); }, "csv(" + f + ")");
  };
  if (files.size() == 1) return one(files[0]);
  return Dataset::from_files(files, one, {.cycle_length = 1});  // one file after the other, as tf.data reads them
}

}  // namespace

void register_readers(nb::module_& m) {
  m.def(
      "load_npz",
      [](const std::string& path) {
        std::vector<std::pair<std::string, tk::Tensor>> arrays;
        {
          nb::gil_scoped_release release;
          arrays = tk::data::load_npz(path);
        }
        std::vector<std::pair<std::string, nb::object>> out;
        for (auto& [key, t] : arrays) out.emplace_back(key, to_numpy(t));
        return out;
      },
      "path"_a, "Every member of a .npz archive, in archive order, with trainkit's dtype rules (data/npy.h).");
  m.def(
      "load_fashion_mnist",
      [](const std::string& dir) {
        tk::data::FashionMnist d;
        {
          nb::gil_scoped_release release;
          d = tk::data::load_fashion_mnist(dir.empty() ? tk::data::default_fashion_mnist_dir() : dir, false);
        }
        return nb::make_tuple(nb::make_tuple(to_numpy(d.x_train), to_numpy(d.y_train)),
                              nb::make_tuple(to_numpy(d.x_test), to_numpy(d.y_test)));
      },
      "dir"_a, "The four IDX files (plain or gzipped) of dir (\"\": $TK_FASHION_MNIST_DIR or Debian's), uint8.");
  m.def("csv_dataset", &csv_dataset, "files"_a, "columns"_a, "header"_a, "delimiter"_a, "select"_a);
}

}  // namespace tkpy
