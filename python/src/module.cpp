// trainkit._trainkit: the native half of the Python package (python/trainkit/ is the other half). The Keras bridge
// (Bridge, which is also the native API's model), tk.data's Dataset, the memory plan, byte sizes and trainkit's errors
// as Python exceptions.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "bridge.h"
#include "dataset.h"
#include "errors.h"
#include "preprocessing.h"
#include "readers.h"
#include "runtime.h"
#include "trainkit/runtime/memory.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_trainkit, m) {
  m.doc() = "trainkit's native module (use the trainkit package: import trainkit as tk)";
  tkpy::register_errors(m);
  tkpy::register_runtime(m);
  tkpy::register_dataset(m);
  tkpy::register_preprocessing(m);
  tkpy::register_readers(m);
  m.attr("AUTO_BATCH_SIZE") = tk::kAutoBatchSize;

  m.def("parse_bytes", &tk::config::parse_bytes, "text"_a,
        "Bytes from '1.5GiB', '512MB' or '1024' (KB/MB/GB: powers of 1000; KiB/MiB/GiB: of 1024).");
  m.def("set_random_seed", &tk::utils::set_random_seed, "seed"_a,
        "Seeds weight initializers, dropout and shuffles made afterwards (keras.utils.set_random_seed).");
  m.def("clear_session", &tk::clear_session, "Resets trainkit's automatic layer names and global seed stream.");
  m.def("format_bytes", &tk::config::format_bytes, "bytes"_a);

  nb::class_<tk::MemoryPlan>(m, "MemoryPlan", "The memory one training step takes, planned before anything runs.")
      .def_ro("batch_size", &tk::MemoryPlan::batch_size)
      .def_ro("weights", &tk::MemoryPlan::weights)
      .def_ro("optimizer_state", &tk::MemoryPlan::optimizer_state)
      .def_ro("arena", &tk::MemoryPlan::arena)
      .def_ro("workspace", &tk::MemoryPlan::workspace)
      .def_ro("total", &tk::MemoryPlan::total)
      .def_ro("file_staging", &tk::MemoryPlan::file_staging)
      .def_ro("dtype_policy", &tk::MemoryPlan::dtype_policy)
      .def("to_string", &tk::MemoryPlan::to_string)
      .def("svg", &tk::MemoryPlan::svg)
      .def("__str__", &tk::MemoryPlan::to_string);

  nb::class_<tkpy::FitArgs>(m, "FitArgs")
      .def(nb::init<>())
      .def_rw("batch_size", &tkpy::FitArgs::batch_size)
      .def_rw("epochs", &tkpy::FitArgs::epochs)
      .def_rw("verbose", &tkpy::FitArgs::verbose)
      .def_rw("validation_split", &tkpy::FitArgs::validation_split)
      .def_rw("shuffle", &tkpy::FitArgs::shuffle)
      .def_rw("initial_epoch", &tkpy::FitArgs::initial_epoch)
      .def_rw("steps_per_epoch", &tkpy::FitArgs::steps_per_epoch)
      .def_rw("validation_steps", &tkpy::FitArgs::validation_steps)
      .def_rw("seed", &tkpy::FitArgs::seed)
      .def_rw("backup_dir", &tkpy::FitArgs::backup_dir)
      .def_rw("backup_save_freq", &tkpy::FitArgs::backup_save_freq)
      .def_rw("keep_backup", &tkpy::FitArgs::keep_backup)
      .def_rw("tensorboard_dir", &tkpy::FitArgs::tensorboard_dir)
      .def_rw("tensorboard_histogram_freq", &tkpy::FitArgs::tensorboard_histogram_freq)
      .def_rw("tensorboard_update_freq", &tkpy::FitArgs::tensorboard_update_freq)
      .def_rw("class_weight", &tkpy::FitArgs::class_weight);

  nb::class_<tkpy::Bridge>(m, "Bridge", "A trainkit model built from a Keras model's config (model.to_json()).")
      .def(nb::init<const std::string&, const std::string&, bool>(), "config_json"_a, "label"_a, "compile"_a)
      .def_static("load", &tkpy::Bridge::load, "path"_a, "compile"_a)
      .def("compile", &tkpy::Bridge::compile, "compile_config_json"_a, "label"_a)
      .def("save", &tkpy::Bridge::save, "path"_a)
      .def("save_weights", &tkpy::Bridge::save_weights, "path"_a)
      .def("load_weights", &tkpy::Bridge::load_weights, "path"_a)
      .def("to_json", &tkpy::Bridge::to_json)
      .def("count_params", &tkpy::Bridge::count_params)
      .def_prop_ro("name", &tkpy::Bridge::name)
      .def("fit_dataset", &tkpy::Bridge::fit_dataset, "dataset"_a, "args"_a, "validation"_a = nb::none(),
           "callbacks"_a = nb::none())
      .def("evaluate_dataset", &tkpy::Bridge::evaluate_dataset, "dataset"_a)
      .def("predict_dataset", &tkpy::Bridge::predict_dataset, "dataset"_a)
      .def("set_device", &tkpy::Bridge::set_device, "device"_a)
      .def("set_dtype_policy", &tkpy::Bridge::set_dtype_policy, "policy"_a)
      .def_prop_ro("compiled", &tkpy::Bridge::compiled)
      .def("weight_layout", &tkpy::Bridge::weight_layout)
      .def("get_weights", &tkpy::Bridge::get_weights)
      .def("set_weights", &tkpy::Bridge::set_weights, "weights"_a)
      .def("optimizer_variables", &tkpy::Bridge::optimizer_variables)
      .def("set_optimizer_variables", &tkpy::Bridge::set_optimizer_variables, "values"_a)
      .def("fit", &tkpy::Bridge::fit, "x"_a, "y"_a, "args"_a, "validation_data"_a = nb::none(),
           "callbacks"_a = nb::none(), "sample_weight"_a = nb::none(), "validation_sample_weight"_a = nb::none())
      .def("evaluate", &tkpy::Bridge::evaluate, "x"_a, "y"_a, "batch_size"_a, "sample_weight"_a = nb::none())
      .def("predict", &tkpy::Bridge::predict, "x"_a, "batch_size"_a)
      .def("memory_plan", &tkpy::Bridge::memory_plan, "batch_size"_a)
      .def("largest_batch_that_fits", &tkpy::Bridge::largest_batch_that_fits, "bytes"_a, "cap"_a)
      .def("summary", &tkpy::Bridge::summary)
      .def_prop_rw("learning_rate", &tkpy::Bridge::learning_rate, &tkpy::Bridge::set_learning_rate)
      .def_prop_ro("has_learning_rate_schedule", &tkpy::Bridge::has_learning_rate_schedule);
}
