#include "errors.h"

#include "trainkit/core/error.h"

namespace tkpy {

namespace {

PyObject* oom_error = nullptr;
PyObject* unsupported_error = nullptr;
PyObject* format_error = nullptr;
PyObject* base_error = nullptr;

PyObject* new_error(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("trainkit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

}  // namespace

void register_errors(nb::module_& m) {
  base_error = new_error(m, "Error", PyExc_RuntimeError, "An error trainkit raised that has no closer Python type.");
  oom_error = new_error(m, "OutOfMemoryError", PyExc_MemoryError,
                        "A memory budget could not hold what a step needs; the message is the report (the plan).");
  unsupported_error = new_error(m, "UnsupportedError", PyExc_NotImplementedError,
                                "Valid, but not something trainkit does (a layer class, an option, a device).");
  format_error =
      new_error(m, "FormatError", PyExc_ValueError, "A file or config was read but is not what its format promises.");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Interrupted&) {
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const tk::OutOfMemoryError& e) {
      PyErr_SetString(oom_error, e.what());
    } catch (const tk::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const tk::Unsupported& e) {
      PyErr_SetString(unsupported_error, e.what());
    } catch (const tk::FormatError& e) {
      PyErr_SetString(format_error, e.what());
    } catch (const tk::IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const tk::Error& e) {
      PyErr_SetString(base_error, e.what());
    }
  });
}

}  // namespace tkpy
