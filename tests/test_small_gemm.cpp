// small_gemm (backends/cpu/small_gemm.h), the fused attention's block products: every shape kind (row tails of each
// tile height, column tails of each vector width, k = 0), a transposed or not, storing or accumulating, on every ISA
// this CPU has. Each c(i, j) is a chain of fused multiply-adds over p in order, so every ISA gives the bits of a plain
// std::fma loop (checked exactly), which is itself within float rounding of a double reference.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/small_gemm.h"

namespace tk::cpu {
namespace {

struct Problem {
  SmallGemm s;
  bool transposed, accumulate;
};

std::vector<float> random_floats(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

TEST(SmallGemm, EveryIsaComputesTheFusedChainOfAPlainLoop) {
  std::mt19937 gen(7);
  std::vector<Problem> problems;
  for (int64_t m : {1, 5, 6, 7, 8, 9, 13, 17})
    for (int64_t n : {1, 8, 15, 16, 17, 31, 32, 33, 70})
      for (int64_t k : {0, 1, 32, 37}) problems.push_back({{m, n, k}, (m + n) % 2 == 0, (n + k) % 3 == 0});
  problems.push_back({{128, 128, 32}, false, false});  // the transformer's block shapes
  problems.push_back({{128, 32, 128}, true, true});
  int checked = 0;
  for (const Problem& pr : problems) {
    const auto [m, n, k] = pr.s;
    const int64_t lda = pr.transposed ? m + 3 : k + 2, ldb = n + 5, ldc = n + 1;  // strides past the operands
    const std::vector<float> a = random_floats(static_cast<size_t>((pr.transposed ? k : m) * lda + 1), gen);
    const std::vector<float> b = random_floats(static_cast<size_t>(std::max<int64_t>(k, 1) * ldb), gen);
    const std::vector<float> c0 = random_floats(static_cast<size_t>(m * ldc), gen);
    auto at = [&](int64_t i, int64_t p) { return a[static_cast<size_t>(pr.transposed ? p * lda + i : i * lda + p)]; };
    std::vector<float> want = c0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        double exact = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          sum = std::fma(at(i, p), b[static_cast<size_t>(p * ldb + j)], sum);
          exact += double(at(i, p)) * b[static_cast<size_t>(p * ldb + j)];
        }
        float& w = want[static_cast<size_t>(i * ldc + j)];
        if (pr.accumulate) exact += w;
        w = pr.accumulate ? w + sum : sum;
        ASSERT_NEAR(w, exact, 1e-5 * (1.0 + std::abs(exact)));
      }
    for (VecIsa isa : {VecIsa::scalar, VecIsa::avx2, VecIsa::avx512}) {
      if (!vec_isa_supported(isa)) continue;
      std::vector<float> c = c0;
      small_gemm(pr.s, a.data(), lda, pr.transposed, b.data(), ldb, c.data(), ldc, pr.accumulate, isa);
      for (size_t e = 0; e < c.size(); ++e) {
        const bool inside = static_cast<int64_t>(e % static_cast<size_t>(ldc)) < n;
        ASSERT_EQ(c[e], inside ? want[e] : c0[e])
            << "isa " << static_cast<int>(isa) << " m " << m << " n " << n << " k " << k << " element " << e
            << (inside ? "" : " (past n: must be untouched)");
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, static_cast<int>(problems.size()));  // the scalar lanes and at least one vector ISA
}

}  // namespace
}  // namespace tk::cpu
