// Runs with TK_MEMORY_LIMIT=64MiB (set by CTest), in its own process: logical devices must be configured
// before the cpu is first used.
#include <gtest/gtest.h>

#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

// The cpu devices only (a GPU machine lists cuda devices too).
std::vector<DeviceInfo> cpu_devices() {
  std::vector<DeviceInfo> out;
  for (const DeviceInfo& d : config::list_devices())
    if (d.device.kind == DeviceKind::cpu) out.push_back(d);
  return out;
}

TEST(LogicalDevices, SplitTheCpuIntoDevicesWithTheirOwnBudgets) {
  EXPECT_THROW(config::set_logical_device_configuration(Device::cpu(), {size_t{40} << 20, size_t{40} << 20}),
               InvalidArgument)
      << "80 MiB of logical devices do not fit a 64 MiB budget";
  config::set_logical_device_configuration(Device::cpu(), {size_t{24} << 20, size_t{24} << 20});
  const std::vector<DeviceInfo> devices = cpu_devices();
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

// cpu:0 and cpu:1 with 24 MiB each (configured here when this test runs in its own process, as under CTest).
TEST(LogicalDevices, DatasetOnDeviceIsChargedThereAndNamesSizeAndBudgetWhenItDoesNotFit) {
  if (cpu_devices().size() < 2)
    config::set_logical_device_configuration(Device::cpu(), {size_t{24} << 20, size_t{24} << 20});
  Tensor host(Shape{4, 1 << 20}, DType::f32, Device::cpu(0), "host arrays");   // 16 MiB
  Tensor other(Shape{9, 1 << 18}, DType::f32, Device::cpu(1), "other model");  // 9 MiB: 15 MiB left
  try {
    data::Dataset::on_device({host}, Device::cpu(1));
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Dataset::on_device: the arrays need 16.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("of its 24.00 MiB budget free"), std::string::npos) << m;
    EXPECT_NE(m.find("from_tensor_slices"), std::string::npos) << m;
  }
  const size_t before = config::get_memory_info(Device::cpu(1)).current;
  {
    Tensor small = Tensor::from_vector<float>({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
    data::Dataset d = data::Dataset::on_device({small}, Device::cpu(1));
    EXPECT_GT(config::get_memory_info(Device::cpu(1)).current, before) << "the copy is charged to cpu:1";
    data::Iterator it = d.shuffle(4, 3).batch(4).iterator();
    data::Element b;
    ASSERT_TRUE(it.next(b));
    EXPECT_EQ(b[0].device(), Device::cpu(1)) << "batches are gathered on the device";
    float sum = 0;
    for (int i = 0; i < 8; ++i) sum += b[0].data<float>()[i];
    EXPECT_EQ(sum, 28.0f);
  }
  EXPECT_EQ(config::get_memory_info(Device::cpu(1)).current, before) << "given back with the Dataset";
}

}  // namespace
}  // namespace tk
