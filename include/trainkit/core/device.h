// Devices. Only the CPU backend exists today; the CUDA kind is part of the type so that a backend can be
// added without changing the core.
//
//   tk::Device d = tk::Device::cpu();
//   d.to_string();   // "cpu:0"
#pragma once
#include <cstdint>
#include <string>

namespace tk {

enum class DeviceKind : uint8_t { cpu, cuda };
inline constexpr int kDeviceKindCount = 2;

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  std::string to_string() const { return (kind == DeviceKind::cpu ? "cpu:" : "cuda:") + std::to_string(index); }
  bool operator==(const Device&) const = default;
};

}  // namespace tk
