// The op harness's cases for the general tensor ops (graph/op.h from Unary on; tests/op_harness.h): every function
// of Unary, Binary, Compare and Reduce, broadcasting on both sides, every axis kind. gradient_cases() and
// extra_forward_cases() (test_op_gradients.cpp) append these.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "op_harness.h"

namespace tk::graph::harness {
namespace {

void signed_init(int, float* p, int64_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> mag(0.1f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t i = 0; i < n; ++i) p[i] = sign(g) ? mag(g) : -mag(g);
}
InitFn positive(std::vector<int> which) {
  return [which](int i, float* p, int64_t n, std::mt19937& g) {
    if (std::find(which.begin(), which.end(), i) == which.end()) return signed_init(i, p, n, g);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int64_t k = 0; k < n; ++k) p[k] = u(g);
  };
}
// Distinct values 0.1 apart (no ties, no finite-difference step changes an order): maxima, minima, arg extrema.
void spaced(int i, float* p, int64_t n, std::mt19937& g) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  for (int64_t k = 0; k < n; ++k) p[k] = 0.1f * static_cast<float>(perm[static_cast<size_t>(k)]) - 1.0f;
  (void)i;
}
// Near 1 (0.995 .. 1.005, random sign of the offset): products of thousands stay finite and normal.
void near_one(int, float* p, int64_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(0.995f, 1.005f);
  for (int64_t k = 0; k < n; ++k) p[k] = u(g);
}
// Input 0 spaced, input 1 spaced with an offset of 0.05: never equal to input 0 (maximum, minimum, comparisons)...
void interleaved(int i, float* p, int64_t n, std::mt19937& g) {
  spaced(i, p, n, g);
  if (i == 1)
    for (int64_t k = 0; k < n; ++k) p[k] += 0.05f;
}
// ... and with some exact ties for the comparisons.
void with_ties(int i, float* p, int64_t n, std::mt19937& g) {
  std::uniform_int_distribution<int> level(0, 3);
  for (int64_t k = 0; k < n; ++k) p[k] = 0.5f * static_cast<float>(level(g)) - 0.5f;
  (void)i;
}
// floor_divide and mod: dividends m + 1/4 (m in -3 .. 3) over divisors +-1, +-2, +-4: every quotient is at least 1/16
// from an integer, so no finite-difference step crosses floor's jumps (and every value is exact in 16 bits).
void divmod_init(int i, float* p, int64_t n, std::mt19937& g) {
  std::uniform_int_distribution<int> pick(0, i == 0 ? 6 : 5);
  const float divisors[] = {1.0f, -1.0f, 2.0f, -2.0f, 4.0f, -4.0f};
  for (int64_t k = 0; k < n; ++k) p[k] = i == 0 ? static_cast<float>(pick(g) - 3) + 0.25f : divisors[pick(g)];
}
// Input `idx` holds indices k * 3 + 1 mod `rows` (repeats when there are more indices than rows).
InitFn indices_init(int idx, int64_t rows) {
  return [=](int i, float* p, int64_t n, std::mt19937& g) {
    if (i != idx) return signed_init(i, p, n, g);
    for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>((k * 3 + 1) % rows);
  };
}
// Input 0 a bool condition: 0 or 1 at random.
void condition_init(int i, float* p, int64_t n, std::mt19937& g) {
  if (i != 0) return signed_init(i, p, n, g);
  std::bernoulli_distribution b(0.5);
  for (int64_t k = 0; k < n; ++k) p[k] = b(g) ? 1.0f : 0.0f;
}
// Away from clip's bounds (-0.9, 1.1) by more than the finite-difference step.
void clip_init(int, float* p, int64_t n, std::mt19937& g) {
  const float v[] = {-1.7f, -1.3f, -0.6f, -0.2f, 0.3f, 0.8f, 1.4f, 1.9f};
  std::uniform_int_distribution<int> pick(0, 7);
  for (int64_t k = 0; k < n; ++k) p[k] = v[pick(g)];
}

Attrs unary_attrs(UnaryFn f, float p0 = 0.0f, float p1 = 0.0f) {
  Attrs at;
  at.unary = f;
  at.fn_param[0] = p0;
  at.fn_param[1] = p1;
  return at;
}
Attrs binary_attrs(BinaryFn f) {
  Attrs at;
  at.binary = f;
  return at;
}
Attrs reduce_attrs(ReduceFn f, uint32_t axes, bool keepdims) {
  Attrs at;
  at.reduce = f;
  at.axes = axes;
  at.keepdims = keepdims;
  return at;
}

const char* unary_name(UnaryFn f) {
  switch (f) {
#define TK_NAME(n) \
  case UnaryFn::n: \
    return #n;
    TK_UNARY_FNS(TK_NAME)
#undef TK_NAME
    default:
      return "?";
  }
}
const char* binary_name(BinaryFn f) {
  switch (f) {
#define TK_NAME(n)  \
  case BinaryFn::n: \
    return #n;
    TK_ARITHMETIC_FNS(TK_NAME)
    TK_COMPARISON_FNS(TK_NAME)
#undef TK_NAME
    default:
      return "?";
  }
}
const char* reduce_name(ReduceFn f) {
  switch (f) {
#define TK_NAME(n)  \
  case ReduceFn::n: \
    return #n;
    TK_REDUCE_FNS(TK_NAME)
#undef TK_NAME
    default:
      return "?";
  }
}

Case unary_case(UnaryFn f, bool grad_op) {
  Attrs at = unary_attrs(f);
  InitFn init = signed_init;
  switch (f) {
    case UnaryFn::log:
    case UnaryFn::log1p:
    case UnaryFn::sqrt:
    case UnaryFn::rsqrt:
      init = positive({grad_op ? 1 : 0});
      break;
    case UnaryFn::elu:
      at.fn_param[0] = 1.3f;
      break;
    case UnaryFn::leaky_relu:
      at.fn_param[0] = 0.2f;
      break;
    case UnaryFn::clip:
      at.fn_param[0] = -0.9f, at.fn_param[1] = 1.1f;
      init = clip_init;
      break;
    default:
      break;
  }
  const std::string label = std::string(grad_op ? "UnaryGrad " : "Unary ") + unary_name(f);
  if (grad_op) return Case{label, Op::UnaryGrad, {{3, 4}, {3, 4}}, {}, at, init};
  return Case{label, Op::Unary, {{3, 4}}, {true}, at, init};
}

}  // namespace

std::vector<Case> tensor_gradient_cases() {
  std::vector<Case> c;
  for (int f = 0; f < kUnaryFnCount; ++f) c.push_back(unary_case(static_cast<UnaryFn>(f), false));
  // Broadcasting on either side, and both at once.
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 3, 4}, {3, 1}}, {{4}, {2, 1, 4}}, {{3, 4}, {3, 4}}};
  for (int f = 0; f < static_cast<int>(BinaryFn::equal); ++f) {
    const auto fn = static_cast<BinaryFn>(f);
    for (const auto& [a, b] : shapes) {
      InitFn init = signed_init;
      if (fn == BinaryFn::power) init = positive({0});
      if (fn == BinaryFn::maximum || fn == BinaryFn::minimum) init = interleaved;
      if (fn == BinaryFn::floor_divide || fn == BinaryFn::mod) init = divmod_init;
      c.push_back({std::string("Binary ") + binary_name(fn) + " " + a.to_string() + " " + b.to_string(),
                   Op::Binary,
                   {a, b},
                   {true, true},
                   binary_attrs(fn),
                   init});
    }
  }
  c.push_back(
      {"Where broadcast", Op::Where, {{3, 4}, {3, 4}, {4}}, {false, true, true}, {}, condition_init, {DType::boolean}});
  c.push_back({"Where scalar branch",
               Op::Where,
               {{2, 3, 1}, {1}, {2, 3, 4}},
               {false, true, true},
               {},
               condition_init,
               {DType::boolean}});
  for (int f = 0; f < kReduceFnCount; ++f) {
    const auto fn = static_cast<ReduceFn>(f);
    const bool order = fn == ReduceFn::max || fn == ReduceFn::min;
    const InitFn init = order ? InitFn(spaced) : InitFn(signed_init);
    const std::string n = std::string("Reduce ") + reduce_name(fn);
    c.push_back({n + " last", Op::Reduce, {{3, 5}}, {true}, reduce_attrs(fn, 0b10, false), init});
    c.push_back({n + " first keepdims", Op::Reduce, {{4, 3}}, {true}, reduce_attrs(fn, 0b01, true), init});
    c.push_back({n + " axes 0 and 2", Op::Reduce, {{2, 3, 4}}, {true}, reduce_attrs(fn, 0b101, false), init});
    c.push_back({n + " all", Op::Reduce, {{2, 3, 2}}, {true}, reduce_attrs(fn, 0b111, false), init});
  }
  {
    Attrs at;
    at.shape = Shape{2, 3, 4};
    c.push_back({"BroadcastTo", Op::BroadcastTo, {{3, 1}}, {true}, at});
    at.shape = Shape{3, 5};
    c.push_back({"BroadcastTo scalar", Op::BroadcastTo, {{}}, {true}, at});
  }
  {
    Attrs at;
    at.perm[0] = 2, at.perm[1] = 0, at.perm[2] = 1;
    c.push_back({"Transpose 201", Op::Transpose, {{2, 3, 4}}, {true}, at});
    Attrs t4;
    t4.perm[0] = 0, t4.perm[1] = 2, t4.perm[2] = 1, t4.perm[3] = 3;  // attention's (B, T, H, D) -> (B, H, T, D)
    c.push_back({"Transpose 0213", Op::Transpose, {{2, 3, 2, 4}}, {true}, t4});
  }
  for (int axis : {0, 1, -1}) {
    Attrs at;
    at.axis = axis;
    c.push_back({"Reverse axis " + std::to_string(axis), Op::Reverse, {{2, 3, 4}}, {true}, at});
  }
  {
    Attrs at;
    at.pad_before[0] = 1, at.pad_after[1] = 2, at.value = 0.5f;
    c.push_back({"Pad", Op::Pad, {{2, 3}}, {true}, at});
    Attrs mid;
    mid.pad_before[1] = 2, mid.pad_after[1] = 1;
    c.push_back({"Pad middle axis", Op::Pad, {{2, 3, 2}}, {true}, mid});
  }
  for (int axis : {0, 1, -1}) {
    Attrs at;
    at.axis = axis;
    std::vector<Shape> in = {{2, 3, 4}, {2, 3, 4}};
    in[1][axis < 0 ? 2 : axis] = 2;
    c.push_back({"Concat axis " + std::to_string(axis), Op::Concat, in, {true, true}, at});
  }
  {
    Attrs at;
    at.axis = 1, at.begin = 1, at.size = 2;
    c.push_back({"Slice axis 1", Op::Slice, {{2, 4, 3}}, {true}, at});
    at.axis = -1, at.begin = 2, at.size = 3;
    c.push_back({"Slice last axis", Op::Slice, {{3, 7}}, {true}, at});
  }
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Attrs at;
      at.trans_a = ta, at.trans_b = tb;
      const Shape a = ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, b = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
      c.push_back({"BatchMatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                   Op::BatchMatMul,
                   {a, b},
                   {true, true},
                   at});
    }
  c.push_back({"BatchMatMul broadcast batch", Op::BatchMatMul, {{2, 1, 3, 4}, {3, 4, 5}}, {true, true}});
  c.push_back({"BatchMatMul matrix times batch", Op::BatchMatMul, {{3, 4}, {2, 4, 5}}, {true, true}});
  {
    Attrs at;
    at.axis = 0;
    c.push_back({"Gather rows (embedding)",
                 Op::Gather,
                 {{5, 3}, {7}},
                 {true, false},
                 at,
                 indices_init(1, 5),
                 {std::nullopt, DType::i32}});
    at.axis = 1;
    c.push_back({"Gather axis 1",
                 Op::Gather,
                 {{2, 4, 3}, {2, 2}},
                 {true, false},
                 at,
                 indices_init(1, 4),
                 {std::nullopt, DType::i32}});
  }
  {  // y = LayerNormApply(x, LayerNormStats(x), gamma, beta): the gradient through the statistics
    Attrs at;
    at.epsilon = 1e-3f;
    Case ln{"LayerNormApply through LayerNormStats", Op::LayerNormApply, {{2, 3, 5}, {5}, {5}}, {true, true, true}, at};
    ln.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::LayerNormStats, {in[0]}, a, "stats");
      return std::vector<int>{g.add(Op::LayerNormApply, {in[0], stats, in[1], in[2]}, a, "y")};
    };
    ln.rounds_intermediates = true;
    c.push_back(ln);
  }
  c.push_back({"LogSoftmax", Op::LogSoftmax, {{3, 6}}, {true}});
  return c;
}

std::vector<Case> tensor_forward_cases() {
  std::vector<Case> c;
  for (int f = 0; f < kUnaryFnCount; ++f) c.push_back(unary_case(static_cast<UnaryFn>(f), true));
  c.push_back({"Unary gelu big", Op::Unary, {{70001}}, {}, unary_attrs(UnaryFn::gelu)});
  c.push_back({"Binary add big broadcast", Op::Binary, {{3, 20001}, {20001}}, {}, binary_attrs(BinaryFn::add)});
  for (int f = static_cast<int>(BinaryFn::equal); f < kBinaryFnCount; ++f) {
    const auto fn = static_cast<BinaryFn>(f);
    c.push_back(
        {std::string("Compare ") + binary_name(fn), Op::Compare, {{3, 4}, {4}}, {}, binary_attrs(fn), with_ties});
  }
  for (bool max : {true, false}) {
    Attrs at = reduce_attrs(max ? ReduceFn::max : ReduceFn::min, 0, false);
    at.axis = 1;
    c.push_back(
        {std::string("ArgReduce ") + (max ? "max" : "min") + " axis 1", Op::ArgReduce, {{3, 5, 2}}, {}, at, spaced});
    at.axis = -1;
    at.keepdims = true;
    c.push_back({std::string("ArgReduce ") + (max ? "max" : "min") + " last keepdims",
                 Op::ArgReduce,
                 {{4, 6}},
                 {},
                 at,
                 spaced});
  }
  // Long reduced axes: CUDA's cooperative kernels (a block per output from 1024 elements, a warp from 32, strided or
  // contiguous: launch_geometry.h's reduce_group_threads), against the cpu like every case.
  for (int f = 0; f < kReduceFnCount; ++f) {
    const auto fn = static_cast<ReduceFn>(f);
    const InitFn init = fn == ReduceFn::max || fn == ReduceFn::min ? InitFn(spaced)
                        : fn == ReduceFn::prod                     ? InitFn(near_one)
                                                                   : InitFn(signed_init);
    const std::string n = std::string("Reduce ") + reduce_name(fn);
    c.push_back({n + " long row", Op::Reduce, {{3, 3000}}, {}, reduce_attrs(fn, 0b10, false), init});
    c.push_back({n + " warp rows", Op::Reduce, {{40, 100}}, {}, reduce_attrs(fn, 0b10, false), init});
    c.push_back({n + " long column", Op::Reduce, {{2500, 3}}, {}, reduce_attrs(fn, 0b01, false), init});
    c.push_back({n + " long axes 0 and 2", Op::Reduce, {{30, 2, 70}}, {}, reduce_attrs(fn, 0b101, false), init});
  }
  for (bool max : {true, false}) {
    Attrs at = reduce_attrs(max ? ReduceFn::max : ReduceFn::min, 0, false);
    const std::string n = std::string("ArgReduce ") + (max ? "max" : "min");
    at.axis = -1;
    c.push_back({n + " long row", Op::ArgReduce, {{2, 3000}}, {}, at, spaced});
    c.push_back({n + " warp rows", Op::ArgReduce, {{50, 200}}, {}, at, spaced});
    c.push_back({n + " ties", Op::ArgReduce, {{6, 500}}, {}, at, with_ties});  // the first of equal extremes
    at.axis = 0;
    c.push_back({n + " long column", Op::ArgReduce, {{2000, 3}}, {}, at, spaced});
  }
  {
    Attrs at;
    at.depth = 5;
    Case oh{"OneHot", Op::OneHot, {{2, 3}}, {}, at, indices_init(0, 7), {DType::i32}};  // 5, 6: zero rows
    oh.cast_to_under_test = true;
    c.push_back(oh);
    oh = Case{"OneHot int64", Op::OneHot, {{4}}, {}, at, indices_init(0, 5), {DType::i64}};
    oh.cast_to_under_test = oh.extra_signature = true;
    c.push_back(oh);
  }
  {
    Attrs at;
    at.axis = 0;
    at.shape = Shape{5, 3};
    c.push_back(
        {"GatherGrad rows", Op::GatherGrad, {{7, 3}, {7}}, {}, at, indices_init(1, 5), {std::nullopt, DType::i32}});
    at.axis = 1;
    at.shape = Shape{2, 4, 3};
    Case i64{"GatherGrad axis 1 int64", Op::GatherGrad, {{2, 2, 2, 3}, {2, 2}}, {}, at, indices_init(1, 4),
             {std::nullopt, DType::i64}};
    i64.extra_signature = true;
    c.push_back(i64);
    at.axis = 0;
    i64 =
        Case{"Gather int64 indices", Op::Gather, {{5, 3}, {4}}, {}, at, indices_init(1, 5), {std::nullopt, DType::i64}};
    i64.extra_signature = true;
    c.push_back(i64);
  }
  for (uint8_t field : {0, 1}) {  // this step's learning rate; the update count + 1
    Case sv{field == 0 ? "StepValue learning_rate" : "StepValue step", Op::StepValue, {}};
    sv.attrs.step_value = field;
    UpdateConfig cfg;
    cfg.learning_rate = 0.0625f;
    cfg.iterations = 41;
    sv.update = std::make_shared<UpdateConfig>(cfg);
    c.push_back(sv);
  }
  c.push_back({"Assign", Op::Assign, {{3, 4}, {3, 4}}});
  {  // Keras' weight constraints, in place on a variable (backends/math/constraints.h)
    Attrs at;
    c.push_back({"Constrain NonNeg", Op::Constrain, {{3, 4}}, {}, at});
    at.constraint = 1;  // MaxNorm 1.5 over axis 0
    at.norm_max = 1.5f;
    at.axes = 1u;
    c.push_back({"Constrain MaxNorm axis 0", Op::Constrain, {{5, 4}}, {}, at});
    at.constraint = 2;  // UnitNorm over a Conv2D kernel's window and input channels
    at.axes = 7u;
    c.push_back({"Constrain UnitNorm axes 0,1,2", Op::Constrain, {{2, 2, 3, 4}}, {}, at});
    at.constraint = 3;  // MinMaxNorm over axis 1
    at.norm_min = 0.5f;
    at.norm_max = 1.0f;
    at.norm_rate = 0.5f;
    at.axes = 2u;
    c.push_back({"Constrain MinMaxNorm axis 1", Op::Constrain, {{4, 6}}, {}, at});
  }
  {  // LayerNorm's fused ops; their statistics come from LayerNormStats of x (rounded to the dtype under test)
    Attrs at;
    at.epsilon = 1e-3f;
    c.push_back({"LayerNormStats", Op::LayerNormStats, {{2, 3, 5}}, {}, at});
    Case ig{"LayerNormInputGrad", Op::LayerNormInputGrad, {{4, 6}, {4, 6}, {6}}, {}, at};
    ig.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::LayerNormStats, {in[1]}, a, "stats");
      return std::vector<int>{g.add(Op::LayerNormInputGrad, {in[0], in[1], stats, in[2]}, a, "y")};
    };
    ig.rounds_intermediates = true;
    c.push_back(ig);
    Case gg{"LayerNormGammaGrad", Op::LayerNormGammaGrad, {{4, 6}, {4, 6}}, {}, at};
    gg.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
      const int stats = g.add(Op::LayerNormStats, {in[1]}, a, "stats");
      return std::vector<int>{g.add(Op::LayerNormGammaGrad, {in[0], in[1], stats}, a, "y")};
    };
    gg.rounds_intermediates = true;
    c.push_back(gg);
    // The whole gradient in one sweep: 37 rows make three blocks (16, 16, 5) and a 16-row chunk; 7 features a
    // vector tail
    for (const Shape& xs : {Shape{4, 6}, Shape{37, 7}}) {
      Case all{xs[0] == 4 ? "LayerNormGrad" : "LayerNormGrad blocks", Op::LayerNormGrad, {xs, xs, {xs[-1]}}, {}, at};
      all.build = [](Graph& g, const std::vector<int>& in, const Attrs& a) {
        const int stats = g.add(Op::LayerNormStats, {in[1]}, a, "stats");
        return std::vector<int>{g.add(Op::LayerNormGrad, {in[0], in[1], stats, in[2]}, a, "y")};
      };
      all.rounds_intermediates = true;
      c.push_back(all);
    }
    c.push_back({"LogSoftmax long rows", Op::LogSoftmax, {{3, 1500}}});  // vector lanes and a masked tail
  }  // the variable's storage holds the value after the run
  return c;
}

}  // namespace tk::graph::harness

// ---------------------------------------------------------------- NaN and Inf (tests/test_ops_nonfinite.cpp)
namespace tk::graph::harness {
namespace {

// Finite values in [0.25, 2] with random signs; input i gets NaN at 1 + i, +Inf at n/2 + i and -Inf at n - 2 + i.
void nonfinite_values(int i, float* p, int64_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> mag(0.25f, 2.0f);
  std::bernoulli_distribution sign(0.5);
  for (int64_t k = 0; k < n; ++k) p[k] = sign(g) ? mag(g) : -mag(g);
  p[(1 + i) % n] = NAN;
  p[(n / 2 + i) % n] = INFINITY;
  p[(n - 2 + i) % n] = -INFINITY;
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
double relu6(double x) { return std::isnan(x) ? x : std::min(std::max(x, 0.0), 6.0); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

// Keras 3's definitions in double, written from their formulas (TensorFlow's ops: NaN in, NaN out; Inf as IEEE).
double unary_rule(UnaryFn f, double x, double p0, double p1) {
  switch (f) {
    case UnaryFn::exp:
      return std::exp(x);
    case UnaryFn::expm1:
      return std::expm1(x);
    case UnaryFn::log:
      return std::log(x);
    case UnaryFn::log1p:
      return std::log1p(x);
    case UnaryFn::sqrt:
      return std::sqrt(x);
    case UnaryFn::rsqrt:
      return 1.0 / std::sqrt(x);
    case UnaryFn::square:
      return x * x;
    case UnaryFn::abs:
      return std::abs(x);
    case UnaryFn::negative:
      return -x;
    case UnaryFn::sign:
      return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case UnaryFn::reciprocal:
      return 1.0 / x;
    case UnaryFn::sin:
      return std::sin(x);
    case UnaryFn::cos:
      return std::cos(x);
    case UnaryFn::tanh:
      return std::tanh(x);
    case UnaryFn::sigmoid:
      return sigmoid(x);
    case UnaryFn::softplus:
      return softplus(x);
    case UnaryFn::softsign:
      return x / (1.0 + std::abs(x));
    case UnaryFn::erf:
      return std::erf(x);
    case UnaryFn::gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case UnaryFn::gelu_tanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case UnaryFn::silu:
      return x * sigmoid(x);
    case UnaryFn::mish:
      return x * std::tanh(softplus(x));
    case UnaryFn::hard_sigmoid:
      return relu6(x + 3.0) / 6.0;
    case UnaryFn::hard_swish:
      return x * (relu6(x + 3.0) / 6.0);
    case UnaryFn::relu:
      return std::isnan(x) ? x : std::max(x, 0.0);
    case UnaryFn::relu6:
      return relu6(x);
    case UnaryFn::selu:
      return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x));
    case UnaryFn::elu:
      return x > 0 ? x : p0 * std::expm1(x);
    case UnaryFn::leaky_relu:
      return x >= 0 ? x : p0 * x;
    case UnaryFn::clip:
      return nan_min(nan_max(x, p0), p1);
    default:
      return NAN;
  }
}

double arithmetic_rule(BinaryFn f, double a, double b) {
  switch (f) {
    case BinaryFn::add:
      return a + b;
    case BinaryFn::subtract:
      return a - b;
    case BinaryFn::multiply:
      return a * b;
    case BinaryFn::divide:
      return a / b;
    case BinaryFn::maximum:
      return nan_max(a, b);
    case BinaryFn::minimum:
      return nan_min(a, b);
    case BinaryFn::squared_difference:
      return (a - b) * (a - b);
    case BinaryFn::floor_divide:  // the quotient as the kernels round it (float32), then floor
      return std::floor(static_cast<float>(a) / static_cast<float>(b));
    case BinaryFn::mod: {  // TensorFlow's FloorMod: fmod (exact), then the divisor's sign; NaN for x % 0 or inf % y
      const double m = std::fmod(a, b);
      return m != 0 && ((b < 0) != (m < 0)) ? m + b : m;
    }
    default:
      return NAN;
  }
}

// Over the last axis of (rows, n).
double reduce_rule(ReduceFn f, const float* x, int64_t n) {
  double acc = f == ReduceFn::prod                              ? 1.0
               : f == ReduceFn::max || f == ReduceFn::logsumexp ? -INFINITY
               : f == ReduceFn::min                             ? INFINITY
                                                                : 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double v = x[j];
    acc = f == ReduceFn::prod                              ? acc * v
          : f == ReduceFn::max || f == ReduceFn::logsumexp ? nan_max(acc, v)
          : f == ReduceFn::min                             ? nan_min(acc, v)
                                                           : acc + v;
  }
  if (f == ReduceFn::mean) return acc / double(n);
  if (f == ReduceFn::logsumexp && std::isfinite(acc)) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - acc);
    return acc + std::log(s);
  }
  return acc;
}

}  // namespace

std::vector<NonFiniteCase> tensor_nonfinite_cases() {
  std::vector<NonFiniteCase> c;
  for (int i = 0; i < kUnaryFnCount; ++i) {
    const auto f = static_cast<UnaryFn>(i);
    const float p0 = f == UnaryFn::clip ? -0.9f : f == UnaryFn::elu ? 1.3f : f == UnaryFn::leaky_relu ? 0.2f : 0.0f;
    const float p1 = f == UnaryFn::clip ? 1.1f : 0.0f;
    c.push_back(
        {{std::string("Unary ") + unary_name(f), Op::Unary, {{4, 6}}, {}, unary_attrs(f, p0, p1), nonfinite_values},
         [f, p0, p1](const std::vector<Tensor>& in) {
           Tensor y = Tensor::zeros(in[0].shape());
           for (int64_t k = 0; k < y.numel(); ++k)
             y.data<float>()[k] = static_cast<float>(unary_rule(f, in[0].data<float>()[k], p0, p1));
           return std::vector<Tensor>{y};
         }});
  }
  // The gradients whose masks select (TensorFlow's ReluGrad, Relu6Grad and clip_by_value gradient, and trainkit's
  // fused ReluGrad): dy where the mask holds, else 0 — a NaN x is outside relu's mask and inside clip's, and a NaN
  // or Inf dy outside the mask gives 0. Inputs (dy, x), each with NaN and +-Inf at different places.
  for (UnaryFn f : {UnaryFn::relu, UnaryFn::relu6, UnaryFn::clip}) {
    const float p0 = f == UnaryFn::clip ? -0.9f : 0.0f, p1 = f == UnaryFn::clip ? 1.1f : 0.0f;
    c.push_back(
        {{std::string("UnaryGrad ") + unary_name(f),
          Op::UnaryGrad,
          {{4, 6}, {4, 6}},
          {},
          unary_attrs(f, p0, p1),
          nonfinite_values},
         [f, p0, p1](const std::vector<Tensor>& in) {
           Tensor dx = Tensor::zeros(in[0].shape());
           for (int64_t k = 0; k < dx.numel(); ++k) {
             const double dy = in[0].data<float>()[k], x = in[1].data<float>()[k];
             const bool mask = f == UnaryFn::relu ? x > 0 : f == UnaryFn::relu6 ? x > 0 && x < 6 : !(x < p0 || x > p1);
             dx.data<float>()[k] = static_cast<float>(mask ? dy : 0.0);
           }
           return std::vector<Tensor>{dx};
         }});
  }
  for (BinaryFn f : {BinaryFn::add, BinaryFn::subtract, BinaryFn::multiply, BinaryFn::divide, BinaryFn::maximum,
                     BinaryFn::minimum, BinaryFn::squared_difference, BinaryFn::floor_divide, BinaryFn::mod}) {
    // b broadcast along the rows: each NaN or Inf of b meets a whole column of a.
    c.push_back(
        {{std::string("Binary ") + binary_name(f), Op::Binary, {{4, 6}, {6}}, {}, binary_attrs(f), nonfinite_values},
         [f](const std::vector<Tensor>& in) {
           Tensor y = Tensor::zeros(in[0].shape());
           for (int64_t k = 0; k < y.numel(); ++k)
             y.data<float>()[k] =
                 static_cast<float>(arithmetic_rule(f, in[0].data<float>()[k], in[1].data<float>()[k % 6]));
           return std::vector<Tensor>{y};
         }});
  }
  // Rows of 8 (one thread per output on CUDA), 600 (a warp) and 2000 (a block): each row holds one of NaN, Inf, -Inf.
  for (ReduceFn f :
       {ReduceFn::sum, ReduceFn::mean, ReduceFn::max, ReduceFn::min, ReduceFn::prod, ReduceFn::logsumexp}) {
    for (int64_t w : {8, 600, 2000}) {
      c.push_back({{std::string("Reduce ") + reduce_name(f) + (w == 8 ? "" : " rows of " + std::to_string(w)),
                    Op::Reduce,
                    {{3, w}},
                    {},
                    reduce_attrs(f, 0b10, false),
                    nonfinite_values},
                   [f, w](const std::vector<Tensor>& in) {
                     Tensor y = Tensor::zeros(Shape{3});
                     for (int64_t r = 0; r < 3; ++r)
                       y.data<float>()[r] = static_cast<float>(reduce_rule(f, in[0].data<float>() + r * w, w));
                     return std::vector<Tensor>{y};
                   }});
    }
  }
  return c;
}

}  // namespace tk::graph::harness
