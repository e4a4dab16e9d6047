#include "runtime.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tkpy {

using namespace nb::literals;

tk::Device parse_device(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    try {
      size_t used = 0;
      index = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1 || index < 0) throw std::invalid_argument("index");
    } catch (const std::exception&) {
      throw tk::InvalidArgument("device '" + text + "': the index after ':' is not a number (cpu, cuda, cuda:1)");
    }
  }
  if (kind == "cpu") return tk::Device::cpu(index);
  if (kind == "cuda" || kind == "gpu") return tk::Device::cuda(index);
  throw tk::InvalidArgument("device '" + text + "' is not one trainkit knows (cpu, cuda, cuda:N)");
}

namespace {

nb::dict memory_info(const std::string& device) {
  const tk::MemoryInfo m = tk::config::get_memory_info(parse_device(device));
  nb::dict d;
  d["current"] = m.current;
  d["peak"] = m.peak;
  d["reserved"] = m.reserved;
  d["limit"] = m.limit;
  d["total"] = m.total;
  d["allocations"] = m.allocations;
  d["largest_free_block"] = m.largest_free_block;
  d["fragmentation"] = m.fragmentation;
  d["growth"] = m.growth;
  d["limit_source"] = m.limit_source;
  return d;
}

}  // namespace

void register_runtime(nb::module_& m) {
  nb::class_<tk::DeviceInfo>(m, "DeviceInfo", "A device this process may use (tk.devices()).")
      .def_prop_ro("name", [](const tk::DeviceInfo& d) { return d.device.to_string(); })
      .def_prop_ro("device_type",
                   [](const tk::DeviceInfo& d) { return d.device.kind == tk::DeviceKind::cpu ? "CPU" : "GPU"; })
      .def_prop_ro("index", [](const tk::DeviceInfo& d) { return d.device.index; })
      .def_ro("description", &tk::DeviceInfo::name)
      .def_ro("total", &tk::DeviceInfo::total)
      .def_ro("free", &tk::DeviceInfo::free)
      .def_ro("uuid", &tk::DeviceInfo::uuid)
      .def_ro("pci_bus_id", &tk::DeviceInfo::pci_bus_id)
      .def_prop_ro("compute_capability",
                   [](const tk::DeviceInfo& d) {
                     return std::make_tuple(d.compute_capability_major, d.compute_capability_minor);
                   })
      .def("__repr__", [](const tk::DeviceInfo& d) {
        return "<trainkit.DeviceInfo " + d.device.to_string() + " '" + d.name + "' " +
               tk::config::format_bytes(d.total) + ">";
      });
  m.def(
      "device_name", [](const std::string& device) { return parse_device(device).to_string(); }, "device"_a,
      "The canonical name of a device ('gpu' -> 'cuda:0'); ValueError for a name trainkit does not know.");
  m.def("list_devices", &tk::config::list_devices,
        "The devices this process may use: the cpu, then cuda:0, cuda:1, ... (TK_VISIBLE_DEVICES applied).");
  m.def("no_cuda_device_reason", &tk::config::no_cuda_device_reason);
  m.def(
      "set_memory_limit",
      [](size_t bytes, const std::string& device) { tk::config::set_memory_limit(parse_device(device), bytes); },
      "bytes"_a, "device"_a);
  m.def(
      "set_memory_growth",
      [](bool growth, const std::string& device) { tk::config::set_memory_growth(parse_device(device), growth); },
      "growth"_a, "device"_a);
  m.def("get_memory_info", &memory_info, "device"_a);
  m.def(
      "reset_peak_memory", [](const std::string& device) { tk::config::reset_peak_memory(parse_device(device)); },
      "device"_a);
}

}  // namespace tkpy
