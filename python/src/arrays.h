// NumPy arrays <-> tk::Tensor without copying: an input array becomes a tensor over its own memory (the caller keeps
// the array alive while trainkit uses it), an output tensor becomes an array that shares the tensor's storage.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tkpy {

namespace nb = nanobind;

// A C-contiguous host array of a dtype trainkit reads (float32, float16, int32, int64, uint8, bool); anything else
// is converted by the Python layer (trainkit/_arrays.py) before it gets here. Read-only arrays are taken too:
// trainkit never writes into its input data.
using HostArray = nb::ndarray<nb::numpy, nb::ro, nb::c_contig, nb::device::cpu>;

// The tensor over `a`'s memory (no copy). ValueError naming `what` for a dtype trainkit does not read.
tk::Tensor tensor_view(const HostArray& a, const char* what);
std::vector<tk::Tensor> tensor_views(const std::vector<HostArray>& arrays, const char* what);
// A NumPy array sharing the host tensor's storage (no copy); the array keeps the storage alive.
nb::object to_numpy(const tk::Tensor& t);

// A Python reference that C++ may copy and drop on any thread (a pipeline's worker, without the GIL): the last copy
// takes the GIL to release it (and leaks it once the interpreter is shutting down, when it may not be taken).
using SharedObject = std::shared_ptr<nb::object>;
SharedObject share(nb::object o);
// A read-only NumPy view of a host tensor (no copy) that also keeps `keep` alive: a pipeline element may be a view of
// the arrays a Python Dataset holds (from_tensor_slices), which must outlive any view a map function keeps.
nb::object readonly_numpy(const tk::Tensor& t, const SharedObject& keep);
// The tensor over `a`'s memory (no copy) that keeps `owner` (the array) alive for as long as the tensor's storage
// lives, on whichever thread drops it: for arrays made by Python code inside the pipeline (a map function's results).
tk::Tensor owning_tensor_view(const HostArray& a, nb::object owner, const char* what);

}  // namespace tkpy
