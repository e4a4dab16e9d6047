#include "cli/run_options.h"

#include <algorithm>
#include <cctype>

#include "trainkit/nn/mixed_precision.h"
#include "trainkit/runtime/memory.h"

namespace tk::cli {

Device parse_device(const std::string& text) {
  std::string s = text;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    const std::string n = s.substr(colon + 1);
    if (n.empty() || n.size() > 4 || !std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c); }))
      throw InvalidArgument("--device " + text + ": the index after ':' must be a number (e.g. cuda:0)");
    index = std::stoi(n);
  }
  if (kind == "cpu") return Device::cpu(index);
  if (kind == "cuda" || kind == "gpu") return Device::cuda(index);
  throw InvalidArgument("--device " + text + ": expected cpu, cpu:N, cuda or cuda:N (`trainkit devices` lists them)");
}

void add_run_options(CLI::App* command, RunOptions& o) {
  command
      ->add_option(
          "--device", o.device,
          "Where the model runs: cpu, cpu:N, cuda, cuda:N, or auto (the most unleased memory; see `trainkit jobs`)")
      ->capture_default_str();
  command
      ->add_option("--dtype-policy", o.dtype_policy,
                   "Keras dtype policy: float32, mixed_float16 (with dynamic loss scaling) or mixed_bfloat16: "
                   "float32 weights, 16-bit activations; a model file keeps its own unless this is given")
      ->capture_default_str()
      ->each([&o](const std::string&) { o.dtype_policy_given = true; });
  command->add_option(
      "--memory-limit", o.memory_limit,
      "Memory budget of the device, e.g. 512MiB or 1.5GiB (the same as TK_MEMORY_LIMIT, which it overrides)");
  add_lease_options(command, o.lease);
}

size_t parse_memory_limit(const std::string& text) {
  try {
    return config::parse_bytes(text);
  } catch (const Error& e) {
    throw InvalidArgument("--memory-limit " + text + ": " + e.what());
  }
}

Device apply_run_options(const RunOptions& o) {
  apply_lease_options(o.lease);
  const Device device = o.device == "auto" ? auto_device(true) : parse_device(o.device);
  require_compute_device(device);
  require_dtype_policy(o.dtype_policy);
  mixed_precision::set_global_policy(o.dtype_policy);  // models made from here on take it
  if (!o.memory_limit.empty()) {
    config::set_memory_limit(device, parse_memory_limit(o.memory_limit));
  }
  return device;
}

void configure_model(Model& model, const RunOptions& o, Device device) {
  model.set_device(device);
  if (o.dtype_policy_given) model.set_dtype_policy(o.dtype_policy);
}

distribute::MirroredStrategy replicas_over(Device device, int replicas, const std::string& command,
                                           const std::string& memory_limit) {
  if (replicas < 1) throw InvalidArgument(command + " --replicas must be >= 1, got " + std::to_string(replicas));
  if (device.kind == DeviceKind::cuda) {  // one replica per GPU, from --device's on; each under --memory-limit
    std::vector<Device> gpus;
    for (int r = 0; r < replicas; ++r) {
      gpus.push_back(Device::cuda(device.index + r));
      if (r > 0 && !memory_limit.empty()) {
        try {
          config::set_memory_limit(gpus.back(), parse_memory_limit(memory_limit));
        } catch (const Error& e) {
          throw InvalidArgument(command + " --replicas " + std::to_string(replicas) + " --device " +
                                device.to_string() + ": one replica per GPU needs " + gpus.back().to_string() + ": " +
                                e.what() + " (`trainkit devices` lists the GPUs; use fewer replicas)");
        }
      }
    }
    return distribute::MirroredStrategy(gpus);  // its errors name a GPU that is missing, or NCCL not built
  }
  if (device.kind != DeviceKind::cpu)
    throw Unsupported(command + " --replicas splits the cpu or takes GPUs, not " + device.to_string());
  const size_t share = config::get_memory_info(device).limit / static_cast<size_t>(replicas);
  config::set_logical_device_configuration(Device::cpu(), std::vector<size_t>(static_cast<size_t>(replicas), share));
  std::vector<Device> devices;
  for (int r = 0; r < replicas; ++r) devices.push_back(Device::cpu(r));
  return distribute::MirroredStrategy(devices);
}

}  // namespace tk::cli
