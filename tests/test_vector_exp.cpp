// The CPU's vectorized exp (backends/cpu/vector_exp.h) against expf: relative error, the special values, the row
// helpers' sums and maxima (NaN rules of the shared softmax math), and softmax_rows against a double reference; each
// in every ISA's lanes this CPU runs (an AVX-512 machine checks the AVX2 and scalar lanes too).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/vector_exp.h"

namespace tk::cpu {
namespace {

std::vector<VecIsa> isas() {
  std::vector<VecIsa> v;
  for (VecIsa i : {VecIsa::scalar, VecIsa::avx2, VecIsa::avx512})
    if (vec_isa_supported(i)) v.push_back(i);
  return v;
}
std::string name(VecIsa i) { return i == VecIsa::avx512 ? "avx512" : i == VecIsa::avx2 ? "avx2" : "scalar"; }

TEST(VectorExp, WithinOnePointTwoEMinus7OfExpfOverTheNormalRange) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> x, y;
    for (float v = -87.0f; v < 88.5f; v += 0.00731f) x.push_back(v);
    y.resize(x.size());
    exp_row(x.data(), y.data(), static_cast<int64_t>(x.size()), 0.0f, isa);
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::abs(double(y[i]) - std::exp(double(x[i]))) / std::exp(double(x[i])));
      worst = std::max(worst, std::abs(double(scalar_exp(x[i])) - std::exp(double(x[i]))) / std::exp(double(x[i])));
    }
    EXPECT_LT(worst, 1.5e-7);
  }
}

TEST(VectorExp, SpecialValuesInEveryLaneAndTheTail) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    const std::vector<float> x = {NAN, -INFINITY, INFINITY, -100.0f, 100.0f, 0.0f, -87.2f, 88.6f, NAN, 0.0f, -INFINITY};
    std::vector<float> y(x.size());
    exp_row(x.data(), y.data(), static_cast<int64_t>(x.size()), 0.0f, isa);
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
}

TEST(VectorExp, RowMaxFollowsTheSharedRuleForNan) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> x(20);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    x[13] = 9.0f;
    EXPECT_EQ(max_row(x.data(), 20, isa), 9.0f);
    x[5] = NAN;  // a NaN after the first element never wins
    EXPECT_EQ(max_row(x.data(), 20, isa), 9.0f);
    x[0] = NAN;  // the first element NaN: NaN, as the scalar loop gives
    EXPECT_TRUE(std::isnan(max_row(x.data(), 20, isa)));
    EXPECT_EQ(max_row(x.data() + 1, 3, isa), 0.0f);
  }
}

TEST(VectorExp, RowSumIsTheSumOfTheRow) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    std::vector<float> x(37), y(37);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 2.0f;
    const float s = exp_row(x.data(), y.data(), 37, 1.5f, isa);
    double want = 0;
    for (float v : x) want += std::exp(double(v) - 1.5);
    EXPECT_NEAR(s, want, want * 1e-6);
  }
}

// Specials at every position class: the 16-lane body, the 8-lane body, a masked or scalar tail.
TEST(VectorExp, SpecialValuesAtEveryPositionOfALongRow) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    for (int64_t n : {1, 5, 8, 15, 16, 17, 31, 40, 71}) {
      for (int64_t at = 0; at < n; ++at) {
        std::vector<float> x(static_cast<size_t>(n), 0.5f), y(x.size());
        for (float v : {NAN, -INFINITY, INFINITY, -100.0f}) {
          x[static_cast<size_t>(at)] = v;
          exp_row(x.data(), y.data(), n, 0.0f, isa);
          const float got = y[static_cast<size_t>(at)];
          if (v != v) EXPECT_TRUE(std::isnan(got)) << n << " " << at;
          if (v == -INFINITY || v == -100.0f) EXPECT_EQ(got, 0.0f) << n << " " << at;
          if (v == INFINITY) EXPECT_EQ(got, INFINITY) << n << " " << at;
          if (n > 1) EXPECT_EQ(y[static_cast<size_t>(at ? 0 : n - 1)], scalar_exp(0.5f)) << n << " " << at;
        }
      }
    }
  }
}

// softmax_rows against the double formula, for widths that end in every tail length, in place too. Tolerance: x - max
// is rounded in float32 (an absolute error of ulp(|x - max|) / 2 becomes that relative error in exp), as in every
// float32 softmax.
TEST(VectorExp, SoftmaxRowsMatchTheDoubleFormula) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    for (int64_t n : {1, 3, 8, 10, 16, 17, 33, 64, 100, 1024}) {
      const int64_t rows = 3;
      std::vector<float> x(static_cast<size_t>(rows * n)), y(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = 7.0f * std::sin(0.37f * static_cast<float>(i)) + (i % 5 == 0 ? 30 : 0);
      softmax_rows(x.data(), y.data(), rows, n, isa);
      std::vector<float> z = x;
      softmax_rows(z.data(), z.data(), rows, n, isa);  // in place: the same bits
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * n;
        double m = xr[0], s = 0;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, double(xr[j]));
        for (int64_t j = 0; j < n; ++j) s += std::exp(double(xr[j]) - m);
        for (int64_t j = 0; j < n; ++j) {
          const double want = std::exp(double(xr[j]) - m) / s;
          EXPECT_NEAR(y[static_cast<size_t>(r * n + j)], want, 1e-5 * want + 1e-7) << n << " " << r << " " << j;
          EXPECT_EQ(y[static_cast<size_t>(r * n + j)], z[static_cast<size_t>(r * n + j)]);
        }
      }
    }
  }
}

// softmax_grad_rows: dx = y * (dy - sum(dy * y)) against double, every tail length.
TEST(VectorExp, SoftmaxGradRowsMatchTheDoubleFormula) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    for (int64_t n : {1, 3, 8, 15, 16, 17, 33, 64, 100, 1024}) {
      const int64_t rows = 3;
      std::vector<float> dy(static_cast<size_t>(rows * n)), y(dy.size()), dx(dy.size());
      for (size_t i = 0; i < dy.size(); ++i) {
        dy[i] = std::cos(0.77f * static_cast<float>(i));
        y[i] = 0.5f + 0.4f * std::sin(0.31f * static_cast<float>(i));
      }
      softmax_grad_rows(dy.data(), y.data(), dx.data(), rows, n, isa);
      for (int64_t r = 0; r < rows; ++r) {
        double dot = 0;
        for (int64_t j = 0; j < n; ++j) dot += double(dy[size_t(r * n + j)]) * y[size_t(r * n + j)];
        for (int64_t j = 0; j < n; ++j) {
          const size_t k = size_t(r * n + j);
          EXPECT_NEAR(dx[k], y[k] * (dy[k] - dot), 1e-5 * (1 + std::abs(dot))) << n << " " << r << " " << j;
        }
      }
    }
  }
}

// logsumexp_row: reduce.h's rule (NaN anywhere: NaN; a +-inf max: itself) and its value, every tail length.
TEST(VectorExp, LogSumExpRowFollowsTheReduceRule) {
  for (VecIsa isa : isas()) {
    SCOPED_TRACE(name(isa));
    for (int64_t n : {1, 5, 16, 17, 40, 1000}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 3.0f * std::sin(0.7f * static_cast<float>(i)) + 20.0f;
      double m = x[0], s = 0;
      for (float v : x) m = std::max(m, double(v));
      for (float v : x) s += std::exp(double(v) - m);
      EXPECT_NEAR(logsumexp_row(x.data(), n, isa), m + std::log(s), 2e-6 * (m + std::log(s))) << n;
      for (size_t at : {size_t{0}, x.size() / 2, x.size() - 1}) {
        std::vector<float> z = x;
        z[at] = NAN;
        EXPECT_TRUE(std::isnan(logsumexp_row(z.data(), n, isa))) << n << " " << at;
        z[at] = INFINITY;
        EXPECT_EQ(logsumexp_row(z.data(), n, isa), INFINITY) << n << " " << at;
        z[n > 1 ? (at + 1) % x.size() : at] = NAN;  // +inf and NaN: NaN (the max rule)
        EXPECT_TRUE(std::isnan(logsumexp_row(z.data(), n, isa))) << n << " " << at;
      }
      std::vector<float> low(x.size(), -INFINITY);
      EXPECT_EQ(logsumexp_row(low.data(), n, isa), -INFINITY) << n;
    }
  }
}

}  // namespace
}  // namespace tk::cpu
