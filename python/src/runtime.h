// The runtime from Python: the devices and their memory budgets (trainkit/__init__.py's devices() and
// trainkit/config.py wrap these).
#pragma once
#include <nanobind/nanobind.h>

#include <string>

#include "trainkit/core/device.h"

namespace tkpy {

namespace nb = nanobind;

// "cpu", "cpu:1", "cuda", "gpu", "cuda:1"; ValueError for anything else.
tk::Device parse_device(const std::string& text);

void register_runtime(nb::module_& m);

}  // namespace tkpy
