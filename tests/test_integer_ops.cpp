// The general ops on int32 and int64 (graph/tensor_fns.h, backends/math/binary.h and reduce.h): Binary (every
// function but divide), Compare, Reduce (sum, prod, max, min) and ArgReduce, with NumPy broadcasting, on every backend
// present (CUDA where a GPU is: the same values and the CPU's error text). The references here are written
// independently of the kernels' math: floor division and modulo by the identity a == (a // b) * b + a % b with the
// remainder's sign the divisor's and |a % b| < |b|; wrapping arithmetic in uint64 modulo 2^bits; comparisons on values
// a float cannot tell apart. Integers carry no gradient; true division, mean and logsumexp of integers, and uint8
// arithmetic are dtype errors that say what to do. The float floor_divide and mod are in the op harness
// (tests/test_tensor_op_cases.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/backend.h"
#include "graph/kernel.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "runtime/cuda_device.h"

namespace tk::graph {
namespace {

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (has_backend(DeviceKind::cuda) && !runtime::cuda_devices().devices.empty()) d.push_back({DeviceKind::cuda, 0});
  return d;
}

template <typename T>
Tensor tensor(Shape s, const std::vector<T>& v) {
  Tensor t(std::move(s), dtype_of<T>());
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

// The storage of the variables of the graph being built (a Graph refers to them): one per test or run, outliving the
// Program that reads them and released with it (never kept past a test).
std::deque<Tensor>* g_kept = nullptr;
struct KeepVariables {
  std::deque<Tensor> kept;
  KeepVariables() : previous(g_kept) { g_kept = &kept; }
  ~KeepVariables() { g_kept = previous; }
  std::deque<Tensor>* previous;
};

// Runs the node `out` of g on device d with the variables already on the host; returns the output on the host.
Tensor run_on(Device d, const std::function<int(Graph&, OpBuilder&, Device)>& build) {
  KeepVariables keep;
  Graph g;
  OpBuilder b{g, nullptr, "int_op"};
  const int out = build(g, b, d);
  Program p(std::move(g), {out}, {}, d);
  ExecContext ctx;
  ctx.device = d;
  p.run(ctx);
  return p.output(out).to_device(Device::cpu());
}

// A variable of g holding t on device d, stored in the innermost KeepVariables.
int variable(Graph& g, const std::string& name, const Tensor& t, Device d) {
  g_kept->push_back(d.kind == DeviceKind::cpu ? t : t.to_device(d));
  return g.variable(name, g_kept->back());
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return {t.data<T>(), t.data<T>() + t.numel()};
}

template <typename T>
T wrap(uint64_t v) {  // v modulo 2^bits, as the signed type (two's complement)
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(v));
}

// The operands of the binary tests: a (4, 5), b (5) broadcast along the rows; the extremes, signs and zeros of a
// meet every sign of b (b has no 0: floor_divide and mod by 0 are errors, tested below).
template <typename T>
std::vector<T> a_values() {
  const T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  return {lo, hi, 0, 7, -7, 6, -6, 1, -1, 13, lo + 1, hi - 1, 5, -5, 100, 2, -2, 3, -3, 40};
}
template <typename T>
std::vector<T> b_values() {
  return {2, -2, -1, 3, 7};
}

template <typename T>
void check_binary(BinaryFn f) {
  const std::vector<T> av = a_values<T>(), bv = b_values<T>();
  for (Device d : devices()) {
    const Tensor y = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
      return ops::binary(b, f, variable(g, "a", tensor<T>({4, 5}, av), dev), variable(g, "b", tensor<T>({5}, bv), dev));
    });
    ASSERT_EQ(y.dtype(), dtype_of<T>());
    ASSERT_EQ(y.shape(), (Shape{4, 5}));
    const std::vector<T> got = values<T>(y);
    // floor_divide and mod: the other of the pair, to check them together by their definition.
    std::vector<T> other;
    if (f == BinaryFn::floor_divide || f == BinaryFn::mod)
      other = values<T>(run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
        return ops::binary(b, f == BinaryFn::mod ? BinaryFn::floor_divide : BinaryFn::mod,
                           variable(g, "a", tensor<T>({4, 5}, av), dev), variable(g, "b", tensor<T>({5}, bv), dev));
      }));
    for (size_t k = 0; k < got.size(); ++k) {
      const T a = av[k], bb = bv[k % 5], r = got[k];
      const std::string at = d.to_string() + " a=" + std::to_string(a) + " b=" + std::to_string(bb);
      const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(bb);
      switch (f) {
        case BinaryFn::add:
          EXPECT_EQ(r, wrap<T>(ua + ub)) << at;
          break;
        case BinaryFn::subtract:
          EXPECT_EQ(r, wrap<T>(ua - ub)) << at;
          break;
        case BinaryFn::multiply:
          EXPECT_EQ(r, wrap<T>(ua * ub)) << at;
          break;
        case BinaryFn::squared_difference:
          EXPECT_EQ(r, wrap<T>((ua - ub) * (ua - ub))) << at;
          break;
        case BinaryFn::maximum:
          EXPECT_EQ(r, a > bb ? a : bb) << at;
          break;
        case BinaryFn::minimum:
          EXPECT_EQ(r, a < bb ? a : bb) << at;
          break;
        case BinaryFn::floor_divide:
        case BinaryFn::mod: {
          // The quotient q and remainder m of Python's divmod, checked by their definition (in wrapped arithmetic:
          // MIN // -1 is MIN, as NumPy and TensorFlow give).
          const T q = f == BinaryFn::floor_divide ? r : other[k];
          const T m = f == BinaryFn::mod ? r : other[k];
          EXPECT_EQ(wrap<T>(static_cast<uint64_t>(q) * ub + static_cast<uint64_t>(m)), a) << at << " q=" << q;
          EXPECT_TRUE(m == 0 || ((m < 0) == (bb < 0))) << at << " m=" << m;
          EXPECT_TRUE(bb > 0 ? (m >= 0 && m < bb) : (m <= 0 && m > bb)) << at << " m=" << m;
          break;
        }
        default:
          FAIL() << "untested function";
      }
    }
  }
}

TEST(IntegerOps, ArithmeticWrapsAndBroadcastsAsNumPy) {
  for (BinaryFn f : {BinaryFn::add, BinaryFn::subtract, BinaryFn::multiply, BinaryFn::squared_difference,
                     BinaryFn::maximum, BinaryFn::minimum}) {
    check_binary<int32_t>(f);
    check_binary<int64_t>(f);
  }
}

TEST(IntegerOps, FloorDivideAndModAreDivmodRoundingTowardMinusInfinity) {
  for (BinaryFn f : {BinaryFn::floor_divide, BinaryFn::mod}) {
    check_binary<int32_t>(f);
    check_binary<int64_t>(f);
  }
  // Python's values, by hand: -7 // 2 = -4, -7 % 2 = 1, 7 // -2 = -4, 7 % -2 = -1, MIN // -1 = MIN, MIN % -1 = 0.
  for (Device d : devices()) {
    auto both = [&](BinaryFn f) {
      return values<int32_t>(run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
        const int32_t lo = std::numeric_limits<int32_t>::min();
        return ops::binary(b, f, variable(g, "a", tensor<int32_t>({4}, {-7, 7, lo, 6}), dev),
                           variable(g, "b", tensor<int32_t>({4}, {2, -2, -1, 3}), dev));
      }));
    };
    EXPECT_EQ(both(BinaryFn::floor_divide), (std::vector<int32_t>{-4, -4, std::numeric_limits<int32_t>::min(), 2}));
    EXPECT_EQ(both(BinaryFn::mod), (std::vector<int32_t>{1, -1, 0, 0}));
  }
}

TEST(IntegerOps, PowerIsRepeatedMultiplicationWrapping) {
  for (Device d : devices()) {
    const Tensor y = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
      return ops::binary(b, BinaryFn::power, variable(g, "a", tensor<int64_t>({6}, {3, -2, 0, 0, 7, 2}), dev),
                         variable(g, "b", tensor<int64_t>({6}, {4, 3, 0, 5, 1, 64}), dev));
    });
    // 2^64 wraps to 0, as NumPy's int64 power; 0^0 is 1.
    EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{81, -8, 1, 0, 7, 0})) << d.to_string();
  }
}

TEST(IntegerOps, ComparisonsSeeValuesAFloatCannotTellApart) {
  const int64_t big = (int64_t{1} << 53) + 1;  // float32 and even float64 round it to 2^53
  for (Device d : devices()) {
    for (BinaryFn f : {BinaryFn::equal, BinaryFn::not_equal, BinaryFn::less, BinaryFn::less_equal, BinaryFn::greater,
                       BinaryFn::greater_equal}) {
      const Tensor y = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
        return ops::compare(b, f, variable(g, "a", tensor<int64_t>({2, 3}, {big, big - 1, -5, 4, 4, 9}), dev),
                            variable(g, "b", tensor<int64_t>({3}, {big - 1, big - 1, -4}), dev));
      });
      ASSERT_EQ(y.dtype(), DType::boolean);
      const int64_t a[] = {big, big - 1, -5, 4, 4, 9}, bb[] = {big - 1, big - 1, -4};
      for (int k = 0; k < 6; ++k) {
        const int64_t u = a[k], v = bb[k % 3];
        const bool want = f == BinaryFn::equal        ? u == v
                          : f == BinaryFn::not_equal  ? u != v
                          : f == BinaryFn::less       ? u < v
                          : f == BinaryFn::less_equal ? u <= v
                          : f == BinaryFn::greater    ? u > v
                                                      : u >= v;
        EXPECT_EQ(y.data<bool>()[k], want) << d.to_string() << " element " << k;
      }
    }
  }
}

TEST(IntegerOps, ReductionsOverAnyAxesAreExact) {
  // (2, 3, 2): sums beyond 2^31 wrap in int32 and are exact in int64; products wrap.
  const std::vector<int64_t> v = {1, -2, 3, 4, int64_t{1} << 40, 6, -7, 8, 9, -10, 11, 12};
  for (Device d : devices()) {
    auto reduce = [&](ReduceFn f, std::vector<int> axes, bool keep) {
      return run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
        return ops::reduce(b, f, variable(g, "x", tensor<int64_t>({2, 3, 2}, v), dev), axes, keep);
      });
    };
    const Tensor s = reduce(ReduceFn::sum, {0, 2}, true);  // (1, 3, 1)
    EXPECT_EQ(s.shape(), (Shape{1, 3, 1}));
    EXPECT_EQ(values<int64_t>(s),
              (std::vector<int64_t>{1 - 2 - 7 + 8, 3 + 4 + 9 - 10, (int64_t{1} << 40) + 6 + 11 + 12}));
    EXPECT_EQ(values<int64_t>(reduce(ReduceFn::max, {1}, false)), (std::vector<int64_t>{int64_t{1} << 40, 6, 11, 12}));
    EXPECT_EQ(values<int64_t>(reduce(ReduceFn::min, {0, 1, 2}, false)), (std::vector<int64_t>{-10}));
    EXPECT_EQ(values<int64_t>(reduce(ReduceFn::prod, {0}, false)),
              (std::vector<int64_t>{-7, -16, 27, -40, 11 * (int64_t{1} << 40), 72}));
    // int32: 3 * 2^30 wraps to -2^30.
    const Tensor w = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
      const int32_t q = int32_t{1} << 30;
      return ops::reduce(b, ReduceFn::sum, variable(g, "x", tensor<int32_t>({3}, {q, q, q}), dev), {0}, false);
    });
    EXPECT_EQ(w.data<int32_t>()[0], -(int32_t{1} << 30)) << d.to_string();
    // ArgReduce: the first of equal extremes.
    const Tensor am = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
      return ops::arg_reduce(b, ReduceFn::max,
                             variable(g, "x", tensor<int32_t>({2, 4}, {3, 9, 9, 1, -4, -8, -8, -4}), dev), 1, false);
    });
    EXPECT_EQ(values<int32_t>(am), (std::vector<int32_t>{1, 0})) << d.to_string();
    const Tensor an = run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
      return ops::arg_reduce(b, ReduceFn::min,
                             variable(g, "x", tensor<int64_t>({2, 4}, {3, 9, 9, 1, -4, -8, -8, -4}), dev), 1, false);
    });
    EXPECT_EQ(values<int32_t>(an), (std::vector<int32_t>{3, 1})) << d.to_string();
  }
}

// A divisor of 0 (floor_divide, mod) or a negative exponent (power) is TensorFlow's error, raised before anything is
// computed on the CPU and at the next synchronization on CUDA, with the same words; the message names the node, the
// function, the value, its position in the operand and the operand's shape, and what to do.
TEST(IntegerOps, DivisionByZeroAndNegativePowersAreErrorsNamingThePosition) {
  auto error_on = [](Device d, BinaryFn f, int32_t bad) -> std::string {
    try {
      (void)run_on(d, [&](Graph& g, OpBuilder& b, Device dev) {
        return ops::binary(b, f, variable(g, "a", tensor<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6}), dev),
                           variable(g, "b", tensor<int32_t>({3}, {2, bad, 3}), dev));
      });
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  for (Device d : devices()) {
    for (BinaryFn f : {BinaryFn::floor_divide, BinaryFn::mod}) {
      const std::string m = error_on(d, f, 0);
      EXPECT_NE(m.find("integer division by zero"), std::string::npos) << m;
      EXPECT_NE(m.find("'int_op"), std::string::npos) << m;
      EXPECT_NE(m.find("position 1 of the second operand (3,)"), std::string::npos) << m;
      EXPECT_NE(m.find(f == BinaryFn::mod ? "Binary mod" : "Binary floor_divide"), std::string::npos) << m;
      EXPECT_NE(m.find("where(b == 0"), std::string::npos) << m;
      EXPECT_EQ(m, error_on(Device::cpu(), f, 0)) << "the CPU's words on " << d.to_string();
      EXPECT_EQ(error_on(d, f, -4), "no error") << "the record was cleared when it was reported";
    }
    const std::string p = error_on(d, BinaryFn::power, -3);
    EXPECT_NE(p.find("negative integer powers are not allowed: the exponent -3 at position 1"), std::string::npos) << p;
    EXPECT_EQ(error_on(d, BinaryFn::power, 0), "no error");
  }
}

TEST(IntegerOps, TrueDivisionMeanAndUint8AreDtypeErrorsSayingWhatToDo) {
  KeepVariables keep;
  Graph g;
  OpBuilder b{g, nullptr, "int_op"};
  const int a = variable(g, "a", tensor<int32_t>({3}, {1, 2, 3}), Device::cpu());
  try {
    ops::binary(b, BinaryFn::divide, a, a);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("true division"), std::string::npos) << m;
    EXPECT_NE(m.find("floor_divide"), std::string::npos) << m;
    EXPECT_NE(m.find("int32, int32"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::reduce(b, ReduceFn::mean, a, {0}, false), InvalidArgument);
  EXPECT_THROW(ops::reduce(b, ReduceFn::logsumexp, a, {0}, false), InvalidArgument);
  const int f = variable(g, "f", Tensor::zeros(Shape{3}), Device::cpu());
  EXPECT_THROW(ops::binary(b, BinaryFn::add, a, f), InvalidArgument) << "int32 + float32: Cast first";
  const int u = variable(g, "u", Tensor(Shape{3}, DType::u8), Device::cpu());
  EXPECT_THROW(ops::binary(b, BinaryFn::add, u, u), InvalidArgument);
  EXPECT_THROW(ops::compare(b, BinaryFn::less, u, u), InvalidArgument);
}

// A float reaching the loss only through integers gets no gradient (TensorFlow's None), and building the gradient
// program does not fail; the float path beside it keeps its gradient.
TEST(IntegerOps, IntegersCarryNoGradient) {
  KeepVariables keep;
  Graph g;
  OpBuilder b{g, nullptr, "int_op"};
  Tensor xv(Shape{4}, DType::f32);
  for (int k = 0; k < 4; ++k) xv.data<float>()[k] = 1.5f * static_cast<float>(k) - 2.0f;
  const int x = variable(g, "x", xv, Device::cpu()), w = variable(g, "w", Tensor::zeros(Shape{4}), Device::cpu());
  const int xi = ops::cast(b, x, DType::i32);
  const int yi = ops::reduce(b, ReduceFn::sum, ops::binary(b, BinaryFn::multiply, xi, xi), {0}, false);
  const int through_ints = ops::cast(b, yi, DType::f32);
  const int loss = ops::binary(b, BinaryFn::add, through_ints, ops::reduce(b, ReduceFn::sum, w, {0}, false));
  const std::vector<int> grads = gradients(g, {loss}, {x, w});
  EXPECT_EQ(grads[0], -1) << "no gradient through int32";
  ASSERT_GE(grads[1], 0);
  Program p(std::move(g), {grads[1]}, {}, Device::cpu());
  p.run(ExecContext{});
  EXPECT_EQ(values<float>(p.output(grads[1])), (std::vector<float>{1, 1, 1, 1}));
}

// Every backend registered here has the integer kernels: Binary, Compare, Reduce and ArgReduce in int32 and int64
// (the float coverage test, tests/test_op_gradients.cpp, covers float32/float16/bfloat16; integer ops are declared
// without gradients by IntegersCarryNoGradient above).
TEST(IntegerOps, EveryBackendHasTheIntegerKernels) {
  int checked = 0;
  for (DeviceKind kind : {DeviceKind::cpu, DeviceKind::cuda}) {
    if (!has_backend(kind)) continue;
    for (Op op : {Op::Binary, Op::Compare, Op::Reduce, Op::ArgReduce})
      for (DType t : {DType::i32, DType::i64}) {
        EXPECT_TRUE(has_kernel(kind, op, signature_for(op, t)))
            << Device{kind, 0}.to_string() << " has no " << op_name(op) << " " << dtype_name(t) << " kernel";
        ++checked;
      }
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace tk::graph
