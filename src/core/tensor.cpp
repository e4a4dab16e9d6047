#include "trainkit/core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/device_bytes.h"
#include "trainkit/core/convert.h"

namespace tk {

namespace {
void require_host(const Tensor& t, const char* what) {
  if (t.device().kind != DeviceKind::cpu)
    throw Unsupported(std::string(what) + ": the tensor is on " + t.device().to_string() +
                      ", and this operation has no CUDA implementation yet (no CUDA kernels are built; keep the "
                      "tensor on the cpu)");
}
}  // namespace

Storage::Storage(size_t bytes, Device device, const std::string& owner) : bytes_(bytes), device_(device) {
  data_ = device_allocate(bytes, device, owner);
  if (device.kind == DeviceKind::cpu) {
    std::memset(data_, 0, bytes);
    return;
  }
  try {
    device_memset_zero(data_, bytes, device);
  } catch (...) {
    device_free(data_, device);
    throw;
  }
}

Storage::Storage(void* data, size_t bytes, Device device, std::function<void(void*)> release)
    : data_(data), bytes_(bytes), device_(device), release_(std::move(release)) {
  if (!release_) release_ = [](void*) {};
}

Storage::~Storage() {
  if (release_)
    release_(data_);
  else
    device_free(data_, device_);
}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype, Device device, std::function<void(void*)> release) {
  if (!shape.fully_known()) throw InvalidArgument("from_blob: partially known shape " + shape.to_string());
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(t.shape_.numel()) * dtype_size(dtype), device,
                                         std::move(release));
  return t;
}

Tensor Tensor::to_device(Device device) const {
  Tensor t(shape_, dtype_, device);
  device_copy(t.raw(), device, raw(), this->device(), nbytes());
  return t;
}

Tensor::Tensor(Shape shape, DType dtype, Device device, const std::string& owner)
    : shape_(std::move(shape)), dtype_(dtype) {
  if (!shape_.fully_known())
    throw InvalidArgument("cannot allocate a tensor of partially known shape " + shape_.to_string());
  for (int64_t d : shape_.dims())
    if (d < 0) throw InvalidArgument("negative dimension in shape " + shape_.to_string());
  storage_ = std::make_shared<Storage>(static_cast<size_t>(shape_.numel()) * dtype_size(dtype), device, owner);
}

Tensor Tensor::zeros(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype); }

Tensor Tensor::full(Shape shape, float value) {
  Tensor t(std::move(shape), DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  return t;
}

void Tensor::check_host(const char* what) const {
  if (storage_ && storage_->device().kind != DeviceKind::cpu)
    throw InvalidArgument(
        std::string(what) + ": the tensor (shape " + shape_.to_string() + ", " + std::string(dtype_name(dtype_)) +
        ") is in the memory of " + device().to_string() +
        ", which the host cannot read; copy it to the cpu first (Tensor::to_device(tk::Device::cpu()))");
}

void Tensor::check_type(DType want) const {
  check_host("Tensor::data()");
  if (want != dtype_)
    throw InvalidArgument("tensor of dtype " + std::string(dtype_name(dtype_)) + " accessed as " +
                          std::string(dtype_name(want)) + " (convert it with Tensor::to)");
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device());
  device_copy(t.raw(), t.device(), raw(), device(), nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape.numel() != numel())
    throw InvalidArgument("cannot reshape " + shape_.to_string() + " to " + shape.to_string() +
                          ": element counts differ");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (shape_.rank() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw InvalidArgument("slice_rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") out of range for shape " + shape_.to_string());
  Shape s = shape_.with_batch(end - begin);
  Tensor t(s, dtype_, device());
  size_t row = static_cast<size_t>(shape_.sample_shape().numel()) * dtype_size(dtype_);
  device_copy(t.raw(), t.device(), static_cast<const char*>(raw()) + static_cast<size_t>(begin) * row, device(),
              t.nbytes());
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  require_host(*this, ("Tensor::to(" + std::string(dtype_name(dtype)) + ")").c_str());
  Tensor t(shape_, dtype, device());
  convert_elements(raw(), dtype_, t.raw(), dtype, static_cast<size_t>(numel()));
  return t;
}

std::string Tensor::to_string(int max_elements) const {
  std::ostringstream os;
  os << "Tensor(shape=" << shape_.to_string() << ", dtype=" << dtype_name(dtype_);
  int64_t n = std::min<int64_t>(numel(), max_elements);
  Tensor host = *this;
  if (defined() && device().kind != DeviceKind::cpu) {  // copy the elements shown to the host first
    os << ", device=" << device().to_string();
    host = Tensor(Shape{std::max<int64_t>(n, 0)}, dtype_, Device::cpu(), "Tensor::to_string");
    device_copy(host.raw(), Device::cpu(), raw(), device(), host.nbytes());
  }
  os << ", values=[";
  Tensor f = dtype_ == DType::f32 ? host : host.to(DType::f32);
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << f.data<float>()[i];
  if (numel() > n) os << ", ...";
  os << "])";
  return os.str();
}

}  // namespace tk
