// Comparing Keras weight files in tests (test_keras_files.cpp, test_keras_loss_scale.cpp):
//   EXPECT_LE(max_abs_diff(a, b), 1e-5f);              // two float32 tensors of one shape
//   expect_same_weights(keras_tree, mine, 0.0f);       // the same groups and datasets; float32 values within tol
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "io/hdf5_tree.h"
#include "trainkit/core/tensor.h"

namespace tk::testing {

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i)
    m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// The same groups and datasets, shapes and dtypes; float32 values within `tol`, others bit for bit.
inline void expect_same_weights(const io::H5Tree& a, const io::H5Tree& b, float tol) {
  EXPECT_EQ(a.groups, b.groups);
  ASSERT_EQ(a.datasets.size(), b.datasets.size());
  for (const auto& [path, t] : a.datasets) {
    const Tensor* u = b.dataset(path);
    ASSERT_TRUE(u) << path;
    ASSERT_EQ(t.shape(), u->shape()) << path;
    ASSERT_EQ(t.dtype(), u->dtype()) << path;
    if (t.dtype() == DType::f32)
      EXPECT_LE(max_abs_diff(t, *u), tol) << path;
    else
      EXPECT_EQ(std::memcmp(t.raw(), u->raw(), t.nbytes()), 0) << path;
  }
}

}  // namespace tk::testing
