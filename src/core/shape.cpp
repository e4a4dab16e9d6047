#include "trainkit/core/shape.h"

#include "trainkit/core/error.h"

namespace tk {

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (d < 0) throw InvalidArgument("numel() of a shape with an unknown dimension: " + to_string());
    n *= d;
  }
  return n;
}

bool Shape::fully_known() const {
  for (int64_t d : dims_)
    if (d < 0) return false;
  return true;
}

Shape Shape::with_batch(int64_t batch) const {
  Shape s = *this;
  if (s.rank() > 0) s.dims_[0] = batch;
  return s;
}

Shape Shape::sample_shape() const {
  if (dims_.empty()) return Shape{};
  return Shape(std::vector<int64_t>(dims_.begin() + 1, dims_.end()));
}

std::string Shape::to_string() const {
  std::string s = "(";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? "None" : std::to_string(dims_[i]);
  }
  if (dims_.size() == 1) s += ",";
  return s + ")";
}

}  // namespace tk
