#include "arrays.h"

#include <string>

namespace tkpy {

namespace {

tk::DType dtype_of(const nb::dlpack::dtype& d, const char* what) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(d.code);
  if (d.lanes == 1) {
    if (code == Code::Float && d.bits == 32) return tk::DType::f32;
    if (code == Code::Float && d.bits == 16) return tk::DType::f16;
    if (code == Code::Int && d.bits == 32) return tk::DType::i32;
    if (code == Code::Int && d.bits == 64) return tk::DType::i64;
    if (code == Code::UInt && d.bits == 8) return tk::DType::u8;
    if (code == Code::Bool && d.bits == 8) return tk::DType::boolean;
  }
  throw nb::value_error((std::string(what) + ": an array of a dtype trainkit does not read (code " +
                         std::to_string(d.code) + ", " + std::to_string(d.bits) +
                         " bits): use float32, float16, int32, int64, uint8 or bool")
                            .c_str());
}

nb::dlpack::dtype dlpack_of(tk::DType t) {
  switch (t) {
    case tk::DType::f32:
      return nb::dtype<float>();
    case tk::DType::i32:
      return nb::dtype<int32_t>();
    case tk::DType::i64:
      return nb::dtype<int64_t>();
    case tk::DType::u8:
      return nb::dtype<uint8_t>();
    case tk::DType::boolean:
      return nb::dtype<bool>();
    case tk::DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case tk::DType::bf16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  throw nb::value_error("an output tensor of an unknown dtype");
}

}  // namespace

tk::Tensor tensor_view(const HostArray& a, const char* what) {
  std::vector<int64_t> dims(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) dims[i] = static_cast<int64_t>(a.shape(i));
  // The array outlives the call that uses the tensor (the caller holds it), so the tensor releases nothing.
  return tk::Tensor::from_blob(const_cast<void*>(a.data()), tk::Shape(std::move(dims)), dtype_of(a.dtype(), what),
                               tk::Device::cpu());
}

std::vector<tk::Tensor> tensor_views(const std::vector<HostArray>& arrays, const char* what) {
  std::vector<tk::Tensor> out;
  out.reserve(arrays.size());
  for (const HostArray& a : arrays) out.push_back(tensor_view(a, what));
  return out;
}

nb::object to_numpy(const tk::Tensor& t) {
  if (t.device() != tk::Device::cpu()) throw nb::value_error("to_numpy: the tensor is not in host memory");
  auto* keep = new tk::Tensor(t);  // shares the storage; freed with the array
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<tk::Tensor*>(p); });
  std::vector<size_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  return nb::cast(nb::ndarray<nb::numpy>(keep->raw(), shape.size(), shape.data(), owner, nullptr, dlpack_of(t.dtype()),
                                         nb::device::cpu::value));
}

SharedObject share(nb::object o) {
  return SharedObject(new nb::object(std::move(o)), [](nb::object* p) {
    if (!nb::is_alive()) {
      (void)p->release();  // the interpreter is gone or going: the reference can no longer be dropped
    } else {
      nb::gil_scoped_acquire gil;
      p->reset();
    }
    delete p;
  });
}

nb::object readonly_numpy(const tk::Tensor& t, const SharedObject& keep) {
  if (t.device() != tk::Device::cpu()) throw nb::value_error("readonly_numpy: the tensor is not in host memory");
  struct Owner {
    tk::Tensor tensor;  // shares the storage
    SharedObject keep;
  };
  auto* owner = new Owner{t, keep};
  nb::capsule capsule(owner, [](void* p) noexcept { delete static_cast<Owner*>(p); });
  std::vector<size_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  return nb::cast(nb::ndarray<nb::numpy, nb::ro>(owner->tensor.raw(), shape.size(), shape.data(), capsule, nullptr,
                                                 dlpack_of(t.dtype()), nb::device::cpu::value));
}

tk::Tensor owning_tensor_view(const HostArray& a, nb::object owner, const char* what) {
  const tk::Tensor view = tensor_view(a, what);
  SharedObject keep = share(std::move(owner));
  return tk::Tensor::from_blob(const_cast<void*>(a.data()), view.shape(), view.dtype(), tk::Device::cpu(),
                               [keep = std::move(keep)](void*) mutable { keep.reset(); });
}

}  // namespace tkpy
