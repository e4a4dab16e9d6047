// BatchMatMul's batches as strided GEMM batches (backends/batch_layout.h, what the CUDA kernel hands cuBLASLt): the
// products the calls, counts, strides and offsets describe equal NumPy's matmul broadcasting over the batch axes,
// computed here independently (each output batch index mapped to each operand's by NumPy's rule).
#include <gtest/gtest.h>

#include <vector>

#include "backends/batch_layout.h"

namespace tk::backends {
namespace {

// Row-major y(m, n) = op(a) op(b), a (m, k) or (k, m), b (k, n) or (n, k).
void naive_gemm(const cpu::GemmShape& s, const float* a, const float* b, float* y) {
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < s.k; ++p)
        acc += double(s.ta ? a[p * s.m + i] : a[i * s.k + p]) * double(s.tb ? b[j * s.k + p] : b[p * s.n + j]);
      y[i * s.n + j] = static_cast<float>(acc);
    }
}

// The operand's batch element that output batch element `i` (of batch shape yb) reads: NumPy broadcasting.
int64_t numpy_index(const Shape& yb, const Shape& ob, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int d = yb.rank() - 1; d >= 0; --d) {
    const int64_t c = i % yb[d];
    i /= yb[d];
    const int od = d - (yb.rank() - ob.rank());
    if (od < 0) continue;
    idx += (ob[od] == 1 ? 0 : c) * stride;
    stride *= ob[od];
  }
  return idx;
}

struct Shapes {
  Shape a, b, y;
  bool ta, tb;
};

void check(const Shapes& t) {
  SCOPED_TRACE(t.a.to_string() + " x " + t.b.to_string());
  cpu::GemmShape s;
  s.m = t.y[-2];
  s.n = t.y[-1];
  s.k = t.ta ? t.a[-2] : t.a[-1];
  s.ta = t.ta;
  s.tb = t.tb;
  std::vector<float> a(static_cast<size_t>(t.a.numel())), b(static_cast<size_t>(t.b.numel()));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(int(i % 7) - 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(int(i % 5) - 2) * 0.5f;
  const Shape ab = batch_part(t.a), bb = batch_part(t.b), yb = batch_part(t.y);
  std::vector<float> want(static_cast<size_t>(t.y.numel())), got(want.size(), -999.0f);
  for (int64_t i = 0; i < yb.numel(); ++i)
    naive_gemm(s, a.data() + numpy_index(yb, ab, i) * s.m * s.k, b.data() + numpy_index(yb, bb, i) * s.k * s.n,
               want.data() + i * s.m * s.n);
  const GemmBatches g = gemm_batches(t.a, t.b, t.y, s);
  EXPECT_EQ(g.calls * g.count, yb.numel());
  for (int64_t o = 0; o < g.calls; ++o)
    for (int64_t j = 0; j < g.count; ++j)
      naive_gemm(s, a.data() + g.offset(0, o) + j * g.stride[0], b.data() + g.offset(1, o) + j * g.stride[1],
                 got.data() + g.offset(2, o) + j * g.stride[2]);
  EXPECT_EQ(got, want);
}

TEST(BatchLayout, StridedBatchesEqualNumpyBroadcasting) {
  check({{4, 3, 5}, {4, 5, 2}, {4, 3, 2}, false, false});
  check({{4, 5, 3}, {4, 2, 5}, {4, 3, 2}, true, true});
  check({{3, 5}, {4, 5, 2}, {4, 3, 2}, false, false});                       // a matrix times a batch: a's stride 0
  check({{4, 3, 5}, {5, 2}, {4, 3, 2}, false, false});                       // a batch times a matrix
  check({{2, 1, 3, 5}, {3, 5, 2}, {2, 3, 3, 2}, false, false});              // both broadcast: a loop of batched calls
  check({{2, 3, 3, 5}, {2, 1, 2, 5}, {2, 3, 3, 2}, false, true});            // b repeated along the last batch axis
  check({{2, 3, 4, 3, 5}, {2, 3, 4, 5, 2}, {2, 3, 4, 3, 2}, false, false});  // batch axes merge into one call
  check({{3, 5}, {5, 2}, {3, 2}, false, false});                             // no batch axes: one product
}

TEST(BatchLayout, EqualBatchesAreOneCall) {
  cpu::GemmShape s;
  s.m = 3, s.n = 2, s.k = 5;
  const GemmBatches g = gemm_batches(Shape{2, 3, 4, 3, 5}, Shape{2, 3, 4, 5, 2}, Shape{2, 3, 4, 3, 2}, s);
  EXPECT_EQ(g.calls, 1);
  EXPECT_EQ(g.count, 24);
  EXPECT_EQ(g.stride[0], 15);
  EXPECT_EQ(g.stride[1], 10);
  EXPECT_EQ(g.stride[2], 6);
  const GemmBatches m = gemm_batches(Shape{3, 5}, Shape{4, 5, 2}, Shape{4, 3, 2}, s);
  EXPECT_EQ(m.calls, 1);
  EXPECT_EQ(m.count, 4);
  EXPECT_EQ(m.stride[0], 0);  // the broadcast matrix, repeated
}

}  // namespace
}  // namespace tk::backends
