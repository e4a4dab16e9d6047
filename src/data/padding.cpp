// pad_and_stack: the padding behind padded_batch and bucket_by_sequence_length (tf.data's PaddedBatchDataset).
#include "data/padding.h"

#include <algorithm>
#include <cstring>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

// The padding value's bytes in `dtype` (one element).
std::vector<unsigned char> value_bytes(double v, DType dtype) {
  std::vector<unsigned char> b(dtype_size(dtype));
  switch (dtype) {
    case DType::f32: {
      const auto f = static_cast<float>(v);
      std::memcpy(b.data(), &f, 4);
      break;
    }
    case DType::f16:
    case DType::bf16: {
      const Tensor t = Tensor::full(Shape(std::vector<int64_t>{}), static_cast<float>(v)).to(dtype);
      std::memcpy(b.data(), t.raw(), 2);
      break;
    }
    case DType::i32: {
      const auto i = static_cast<int32_t>(v);
      std::memcpy(b.data(), &i, 4);
      break;
    }
    case DType::i64: {
      const auto i = static_cast<int64_t>(v);
      std::memcpy(b.data(), &i, 8);
      break;
    }
    case DType::u8:
      b[0] = static_cast<unsigned char>(v);
      break;
    case DType::boolean:
      b[0] = v != 0 ? 1 : 0;
      break;
  }
  return b;
}

// Copies `src` (shape `sd`) into the top-left corner of `dst` (shape `dd`, each dim >= sd's): row by row of
// the last dimension. `elem` is the dtype's size.
void copy_block(const char* src, const std::vector<int64_t>& sd, char* dst, const std::vector<int64_t>& dd,
                size_t elem) {
  const size_t r = sd.size();
  if (r == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  // Strides in elements of both layouts.
  std::vector<int64_t> ss(r, 1), ds(r, 1);
  for (size_t d = r - 1; d > 0; --d) {
    ss[d - 1] = ss[d] * sd[d];
    ds[d - 1] = ds[d] * dd[d];
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < r; ++d) rows *= sd[d];
  const size_t run = static_cast<size_t>(sd[r - 1]) * elem;
  if (run == 0) return;
  std::vector<int64_t> pos(r, 0);  // index of the current row (the last entry stays 0)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d + 1 < r; ++d) {
      so += pos[d] * ss[d];
      dof += pos[d] * ds[d];
    }
    std::memcpy(dst + static_cast<size_t>(dof) * elem, src + static_cast<size_t>(so) * elem, run);
    for (size_t d = r - 1; d-- > 0;) {  // odometer over dims [0, r-1)
      if (++pos[d] < sd[d]) break;
      pos[d] = 0;
    }
  }
}

}  // namespace

void check_pad_spec(const PadSpec& spec, const std::string& op) {
  for (size_t c = 0; c < spec.shapes.size(); ++c)
    for (int64_t d : spec.shapes[c])
      if (d < -1)
        throw InvalidArgument(op + ": padded_shapes[" + std::to_string(c) + "] = " + dims_str(spec.shapes[c]) +
                              " has a dimension < -1; use a length >= 0, or -1 for the batch's longest");
}

void pad_and_stack(const std::vector<Element>& items, size_t n, const std::vector<int64_t>& index, const PadSpec& spec,
                   int64_t fill, Element& out, const std::string& op) {
  const Element& first = items[0];
  const size_t nc = first.size();
  const auto where = [&](size_t i) { return "input element " + std::to_string(index[i]); };
  if (!spec.shapes.empty() && spec.shapes.size() != nc)
    throw InvalidArgument(op + ": padded_shapes has " + std::to_string(spec.shapes.size()) + " entries but " +
                          where(0) + " " + shapes_of(first) + " has " + std::to_string(nc) +
                          " components; give one shape per component (-1 for the batch's longest)");
  if (spec.values.size() > 1 && spec.values.size() != nc)
    throw InvalidArgument(op + ": padding_values has " + std::to_string(spec.values.size()) + " entries but " +
                          where(0) + " " + shapes_of(first) + " has " + std::to_string(nc) +
                          " components; give one value, or one per component");
  out.resize(nc);
  for (size_t c = 0; c < nc; ++c) {
    const int rank = first[c].shape().rank();
    const DType dtype = first[c].dtype();
    for (size_t i = 0; i < n; ++i) {
      const Element& e = items[i];
      if (e.size() == nc && !e[c].on_host())
        throw InvalidArgument(op + ": component " + std::to_string(c) + " of " + where(i) +
                              " is in device memory; pad elements on the host (before on_device batching)");
      if (e.size() != nc || e[c].dtype() != dtype || e[c].shape().rank() != rank)
        throw InvalidArgument(op + ": " + where(i) + " is " + shapes_of(e) + " but " + where(0) + " is " +
                              shapes_of(first) + "; padding needs the same number of components, dtypes and ranks");
    }
    // Target shape: the given dims, -1 resolved to `fill` or the batch's longest.
    std::vector<int64_t> target(static_cast<size_t>(rank), -1);
    if (!spec.shapes.empty()) {
      if (static_cast<int>(spec.shapes[c].size()) != rank)
        throw InvalidArgument(op + ": padded_shapes[" + std::to_string(c) + "] = " + dims_str(spec.shapes[c]) +
                              " has rank " + std::to_string(spec.shapes[c].size()) + " but component " +
                              std::to_string(c) + " of " + where(0) + " is " + first[c].shape().to_string() +
                              " (rank " + std::to_string(rank) + ")");
      target = spec.shapes[c];
    }
    for (int d = 0; d < rank; ++d) {
      auto& t = target[static_cast<size_t>(d)];
      if (t == -1 && fill >= 0) t = fill;
      if (t != -1) continue;
      for (size_t i = 0; i < n; ++i) t = std::max(t, items[i][c].dim(d));
    }
    for (size_t i = 0; i < n; ++i)
      for (int d = 0; d < rank; ++d)
        if (items[i][c].dim(d) > target[static_cast<size_t>(d)])
          throw InvalidArgument(op + ": component " + std::to_string(c) + " of " + where(i) + " has shape " +
                                items[i][c].shape().to_string() + ", larger than its padded shape " + dims_str(target) +
                                " in dimension " + std::to_string(d) + "; raise padded_shapes[" + std::to_string(c) +
                                "] (or -1 for the batch's longest), or drop or truncate long elements first");
    std::vector<int64_t> dims{static_cast<int64_t>(n)};
    dims.insert(dims.end(), target.begin(), target.end());
    Tensor t(Shape(dims), dtype, first[c].device(), "dataset/padded_batch");
    const size_t elem = dtype_size(dtype);
    const double v = spec.values.empty() ? 0.0 : spec.values[spec.values.size() == 1 ? 0 : c];
    auto* dst = static_cast<char*>(t.raw());
    const std::vector<unsigned char> pad = value_bytes(v, dtype);
    if (std::all_of(pad.begin(), pad.end(), [](unsigned char b) { return b == 0; }))
      std::memset(dst, 0, t.nbytes());
    else
      for (size_t k = 0; k < t.nbytes(); k += elem) std::memcpy(dst + k, pad.data(), elem);
    int64_t per_item = 1;
    for (int64_t d : target) per_item *= d;
    for (size_t i = 0; i < n; ++i)
      copy_block(static_cast<const char*>(items[i][c].raw()), items[i][c].shape().dims(),
                 dst + i * static_cast<size_t>(per_item) * elem, target, elem);
    out[c] = std::move(t);
  }
}

}  // namespace tk::data
