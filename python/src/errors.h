// trainkit's errors as Python exceptions (registered once, in module.cpp):
//   tk::OutOfMemoryError -> trainkit.OutOfMemoryError (a MemoryError)     tk::InvalidArgument -> ValueError
//   tk::Unsupported      -> trainkit.UnsupportedError (NotImplementedError) tk::FormatError -> trainkit.FormatError
//   tk::IoError          -> OSError                                          (a ValueError)
//   any other tk::Error  -> trainkit.Error (a RuntimeError)                  Interrupted -> the pending
//   KeyboardInterrupt
#pragma once
#include <nanobind/nanobind.h>

#include <exception>

namespace tkpy {

namespace nb = nanobind;

// Thrown (with the GIL released) where a training step boundary found a pending signal: PyErr_CheckSignals already
// set the Python error (KeyboardInterrupt), which the translator leaves in place.
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

void register_errors(nb::module_& m);

}  // namespace tkpy
