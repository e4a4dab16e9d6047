// Tensor: a shape, a dtype, a device and shared storage (copies share data; use clone() for a copy).
//
//   tk::Tensor x = tk::Tensor::zeros({128, 784});            // float32 on cpu:0
//   float* p = x.data<float>();                                // (128, 784) row-major
//   tk::Tensor y = tk::Tensor::from_vector<int32_t>({3}, {1, 2, 3});
//   tk::Tensor head = x.slice_rows(0, 32);                     // copy of rows [0, 32)
//   tk::Tensor h = x.to(tk::DType::f16);                       // any dtype to any dtype (core/convert.h)
//
// data<T>() is for host memory only: on a tensor in a GPU's memory it throws, naming the device (copy it
// with to_device(tk::Device::cpu()) first).
#pragma once
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainkit/core/device.h"
#include "trainkit/core/dtype.h"
#include "trainkit/core/error.h"
#include "trainkit/core/shape.h"

namespace tk {

// Device memory behind tensors, implemented by the runtime (runtime/device_memory.cpp): every byte is
// charged to the device's budget under an owner tag. A link-time seam, so core/ depends on nothing above it.
void* device_allocate(size_t bytes, Device device, const std::string& owner);
void device_free(void* p, Device device) noexcept;

// 256-byte aligned bytes on one device, charged to its budget.
class Storage {
 public:
  Storage(size_t bytes, Device device, const std::string& owner = {});
  // Memory owned elsewhere (not charged to a budget); `release` is called with it when the last tensor goes.
  Storage(void* data, size_t bytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  std::function<void(void*)> release_;  // set for memory owned elsewhere
};

class Tensor {
 public:
  Tensor() = default;
  // `owner` names the allocation in memory statistics and out-of-memory reports ("dense/kernel").
  Tensor(Shape shape, DType dtype, Device device = Device::cpu(), const std::string& owner = {});

  static Tensor zeros(Shape shape, DType dtype = DType::f32);
  static Tensor full(Shape shape, float value);
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values) {
    Tensor t(std::move(shape), dtype_of<T>());
    if (static_cast<size_t>(t.numel()) != values.size())
      throw InvalidArgument("Tensor::from_vector: shape " + t.shape().to_string() + " holds " +
                            std::to_string(t.numel()) + " elements but " + std::to_string(values.size()) +
                            " values were given");
    if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(T));
    return t;
  }

  // A tensor over memory owned elsewhere, on `device` (a host buffer, or device memory from another library).
  static Tensor from_blob(void* data, Shape shape, DType dtype, Device device, std::function<void(void*)> release = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  int64_t dim(int i) const { return shape_[i]; }

  void* raw() { return storage_ ? storage_->data() : nullptr; }
  const void* raw() const { return storage_ ? storage_->data() : nullptr; }
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw());
  }

  Tensor clone() const;
  // Same data viewed with another shape of equal element count.
  Tensor reshape(Shape shape) const;
  // Copy of rows [begin, end) along dimension 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Element-wise conversion between any two dtypes (rounding rules in core/convert.h).
  Tensor to(DType dtype) const;
  // A copy in another device's memory.
  Tensor to_device(Device device) const;
  bool on_host() const { return device().kind == DeviceKind::cpu; }
  std::string to_string(int max_elements = 8) const;

 private:
  void check_type(DType want) const;
  void check_host(const char* what) const;
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace tk
