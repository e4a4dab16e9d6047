// Calls a generic lambda with the C++ type of a dtype code, for the nvcc launchers that instantiate a kernel per
// (source, target) dtype pair: the Cast kernel (cast.cu) and the device gather (device_gather.cu). Codes are
// numbered as tk::DType numbers them (cuda_kernels.cpp and device_gather_plan.cpp assert the order). with_width: the
// same with the unsigned integer of an element's width, for the kernels that move values as bits (tensor_ops.cu,
// layout.cu).
//
//   with_type(from, "cast kernel", "source", [&](auto s) { using S = typename decltype(s)::type; ... });
#pragma once
#include <cstdint>
#include <string>

#include "trainkit/core/error.h"
#include "trainkit/core/half.h"

namespace tk::cuda {

template <typename T>
struct Type {
  using type = T;
};

// f(Type<T>{}) for code 0..6: f32, f16, bf16, i32, i64, u8, bool; an Error naming `who` and `role` otherwise.
template <typename F>
void with_type(int code, const char* who, const char* role, F&& f) {
  switch (code) {
    case 0:
      return f(Type<float>{});
    case 1:
      return f(Type<float16>{});
    case 2:
      return f(Type<bfloat16>{});
    case 3:
      return f(Type<int32_t>{});
    case 4:
      return f(Type<int64_t>{});
    case 5:
      return f(Type<uint8_t>{});
    case 6:
      return f(Type<bool>{});
    default:
      throw Error(std::string(who) + ": unknown " + role + " dtype code " + std::to_string(code));
  }
}

// f(Type<T>{}) with T uint8_t, uint16_t or uint32_t for 1, 2 or 4 bytes; uint64_t otherwise.
template <typename F>
void with_width(int bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(Type<uint8_t>{});
    case 2:
      return f(Type<uint16_t>{});
    case 4:
      return f(Type<uint32_t>{});
    default:
      return f(Type<uint64_t>{});
  }
}

}  // namespace tk::cuda
