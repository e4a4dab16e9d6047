// The CPU's vectorized exp (backends/cpu/vector_exp.h) against expf: relative error, the special values, the row
// helpers' sums and maxima (NaN rules of the shared softmax math).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/vector_exp.h"

namespace tk::cpu {
namespace {

TEST(VectorExp, WithinOnePointTwoEMinus7OfExpfOverTheNormalRange) {
  std::vector<float> x, y;
  for (float v = -87.0f; v < 88.5f; v += 0.00731f) x.push_back(v);
  y.resize(x.size());
  exp_row(x.data(), y.data(), static_cast<int64_t>(x.size()), 0.0f);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(double(y[i]) - std::exp(double(x[i]))) / std::exp(double(x[i])));
    worst = std::max(worst, std::abs(double(scalar_exp(x[i])) - std::exp(double(x[i]))) / std::exp(double(x[i])));
  }
  EXPECT_LT(worst, 1.5e-7);
}

TEST(VectorExp, SpecialValuesInEveryLaneAndTheTail) {
  const std::vector<float> x = {NAN, -INFINITY, INFINITY, -100.0f, 100.0f, 0.0f, -87.2f, 88.6f, NAN, 0.0f, -INFINITY};
  std::vector<float> y(x.size());
  exp_row(x.data(), y.data(), static_cast<int64_t>(x.size()), 0.0f);
  for (size_t base : {size_t{0}, size_t{8}}) {  // a vector lane and a tail element alike
    EXPECT_TRUE(std::isnan(y[base]));
    EXPECT_EQ(y[base + 1], base ? 1.0f : 0.0f);
  }
  EXPECT_EQ(y[2], INFINITY);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], INFINITY);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[10], 0.0f);
}

TEST(VectorExp, RowMaxFollowsTheSharedRuleForNan) {
  std::vector<float> x(20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  x[13] = 9.0f;
  EXPECT_EQ(max_row(x.data(), 20), 9.0f);
  x[5] = NAN;  // a NaN after the first element never wins
  EXPECT_EQ(max_row(x.data(), 20), 9.0f);
  x[0] = NAN;  // the first element NaN: NaN, as the scalar loop gives
  EXPECT_TRUE(std::isnan(max_row(x.data(), 20)));
  EXPECT_EQ(max_row(x.data() + 1, 3), 0.0f);
}

TEST(VectorExp, RowSumIsTheSumOfTheRow) {
  std::vector<float> x(37), y(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 2.0f;
  const float s = exp_row(x.data(), y.data(), 37, 1.5f);
  double want = 0;
  for (float v : x) want += std::exp(double(v) - 1.5);
  EXPECT_NEAR(s, want, want * 1e-6);
}

}  // namespace
}  // namespace tk::cpu
