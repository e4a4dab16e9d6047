#include "nn/training/batching.h"

#include <cstring>

namespace tk::nn {
namespace {

template <typename S, typename D>
void convert_rows(const S* src, const int64_t* idx, int64_t begin, int64_t n, int64_t row, D* dst) {
  for (int64_t r = 0; r < n; ++r) {
    const S* s = src + (idx ? idx[r] : begin + r) * row;
    D* d = dst + r * row;
    for (int64_t j = 0; j < row; ++j) d[j] = static_cast<D>(s[j]);
  }
}

template <typename D>
void from_any(const Tensor& src, const int64_t* idx, int64_t begin, int64_t n, int64_t row, D* dst) {
  switch (src.dtype()) {
    case DType::f32:
      return convert_rows(src.data<float>(), idx, begin, n, row, dst);
    case DType::i32:
      return convert_rows(src.data<int32_t>(), idx, begin, n, row, dst);
    case DType::i64:
      return convert_rows(src.data<int64_t>(), idx, begin, n, row, dst);
    case DType::u8:
      return convert_rows(src.data<uint8_t>(), idx, begin, n, row, dst);
    case DType::boolean:
      return convert_rows(src.data<bool>(), idx, begin, n, row, dst);
    default:
      throw Unsupported("batches of dtype " + std::string(dtype_name(src.dtype())) + " (convert to float32)");
  }
}

}  // namespace

void gather_rows(const Tensor& src, const int64_t* idx, int64_t begin, int64_t n, void* dst, DType dst_dtype) {
  const int64_t row = src.shape().rank() > 0 && src.dim(0) > 0 ? src.numel() / src.dim(0) : 0;
  if (src.dtype() == dst_dtype) {
    const size_t bytes = static_cast<size_t>(row) * dtype_size(dst_dtype);
    const auto* s = static_cast<const char*>(src.raw());
    auto* d = static_cast<char*>(dst);
    if (!idx) {
      std::memcpy(d, s + static_cast<size_t>(begin) * bytes, static_cast<size_t>(n) * bytes);
    } else {
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(d + static_cast<size_t>(r) * bytes, s + static_cast<size_t>(idx[r]) * bytes, bytes);
    }
    return;
  }
  if (dst_dtype == DType::f32) return from_any(src, idx, begin, n, row, static_cast<float*>(dst));
  if (dst_dtype == DType::i32) return from_any(src, idx, begin, n, row, static_cast<int32_t*>(dst));
  throw Unsupported("program input of dtype " + std::string(dtype_name(dst_dtype)));
}

}  // namespace tk::nn
