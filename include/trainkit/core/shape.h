// Tensor shapes. A dimension of -1 is unknown ("None" in Keras, normally the batch).
//
//   tk::Shape s{128, 784};
//   s.numel();        // 100352
//   s.to_string();    // "(128, 784)"
//   tk::Shape{-1, 10}.to_string();  // "(None, 10)"
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tk {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  const std::vector<int64_t>& dims() const { return dims_; }

  // Product of all dimensions (1 for a scalar). Requires every dimension known.
  int64_t numel() const;
  bool fully_known() const;
  // Same shape with dimension 0 replaced (used to bind the batch dimension).
  Shape with_batch(int64_t batch) const;
  // Dimensions [1, rank): the per-sample shape.
  Shape sample_shape() const;
  std::string to_string() const;

  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace tk
