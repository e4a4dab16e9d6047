#include "trainkit/core/tensor.h"

#include <cstdlib>
#include <sstream>

namespace tk {

Storage::Storage(size_t bytes, Device device, const std::string& owner) : bytes_(bytes), device_(device) {
  data_ = device_allocate(bytes, device, owner);
  std::memset(data_, 0, bytes);
}

Storage::~Storage() { device_free(data_, device_); }

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

void Tensor::check_type(DType want) const {
  if (want != dtype_)
    throw InvalidArgument("tensor of dtype " + std::string(dtype_name(dtype_)) + " accessed as " +
                          std::string(dtype_name(want)) + " (convert it with Tensor::to)");
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device());
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
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
  if (t.nbytes()) std::memcpy(t.raw(), static_cast<const char*>(raw()) + static_cast<size_t>(begin) * row, t.nbytes());
  return t;
}

namespace {
template <typename D>
void convert_into(const Tensor& src, D* dst) {
  int64_t n = src.numel();
  switch (src.dtype()) {
    case DType::f32: {
      auto p = src.data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
      break;
    }
    case DType::i32: {
      auto p = src.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
      break;
    }
    case DType::i64: {
      auto p = src.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
      break;
    }
    case DType::u8: {
      auto p = src.data<uint8_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
      break;
    }
    case DType::boolean: {
      auto p = src.data<bool>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<D>(p[i]);
      break;
    }
    default:
      throw Unsupported("conversion from " + std::string(dtype_name(src.dtype())) + " is not implemented");
  }
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t(shape_, dtype, device());
  switch (dtype) {
    case DType::f32:
      convert_into(*this, t.data<float>());
      break;
    case DType::i32:
      convert_into(*this, t.data<int32_t>());
      break;
    case DType::i64:
      convert_into(*this, t.data<int64_t>());
      break;
    case DType::u8:
      convert_into(*this, t.data<uint8_t>());
      break;
    default:
      throw Unsupported("conversion to " + std::string(dtype_name(dtype)) + " is not implemented");
  }
  return t;
}

std::string Tensor::to_string(int max_elements) const {
  std::ostringstream os;
  os << "Tensor(shape=" << shape_.to_string() << ", dtype=" << dtype_name(dtype_) << ", values=[";
  int64_t n = std::min<int64_t>(numel(), max_elements);
  Tensor f = dtype_ == DType::f32 ? *this : to(DType::f32);
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << f.data<float>()[i];
  if (numel() > n) os << ", ...";
  os << "])";
  return os.str();
}

}  // namespace tk
