// Runs with TK_MEMORY_LIMIT=64MiB (set by CTest), in its own process: logical devices must be configured
// before the cpu is first used.
#include <gtest/gtest.h>

#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

TEST(LogicalDevices, SplitTheCpuIntoDevicesWithTheirOwnBudgets) {
  EXPECT_THROW(config::set_logical_device_configuration(Device::cpu(), {size_t{40} << 20, size_t{40} << 20}),
               InvalidArgument)
      << "80 MiB of logical devices do not fit a 64 MiB budget";
  config::set_logical_device_configuration(Device::cpu(), {size_t{24} << 20, size_t{24} << 20});
  const std::vector<DeviceInfo> devices = config::list_devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].device, Device::cpu(1));
  EXPECT_EQ(config::get_memory_info(Device::cpu(1)).limit, size_t{24} << 20);

  Tensor on_one(Shape{16 << 20 >> 2}, DType::f32, Device::cpu(1), "16 MiB on cpu:1");
  EXPECT_EQ(on_one.device(), Device::cpu(1));
  EXPECT_EQ(config::get_memory_info(Device::cpu(1)).current, size_t{16} << 20);
  EXPECT_EQ(config::get_memory_info(Device::cpu(0)).current, 0u) << "budgets are separate";
  EXPECT_THROW(Tensor(Shape{16 << 20 >> 2}, DType::f32, Device::cpu(1)), OutOfMemoryError) << "cpu:1 is full";
  Tensor on_zero(Shape{16 << 20 >> 2}, DType::f32, Device::cpu(0));  // cpu:0 still has room
  EXPECT_THROW(config::set_logical_device_configuration(Device::cpu(), {size_t{8} << 20}), InvalidArgument);
  EXPECT_THROW(Tensor(Shape{4}, DType::f32, Device::cpu(2)), Unsupported);
}

}  // namespace
}  // namespace tk
