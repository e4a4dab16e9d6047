// The functions of the general tensor ops (graph/op.h: Unary, UnaryGrad, Binary, Compare, Reduce, ArgReduce), in a
// header with no dependencies so that the per-element math (backends/math/unary.h, binary.h), compiled by both the
// host compiler and nvcc, names them the same way the graph does. The X-macro lists are what kernel drivers switch
// over (one case per function, each instantiating the math template), so adding a function is one line here plus
// its math.
//
//   tk::graph::Attrs at;
//   at.unary = tk::graph::UnaryFn::gelu_tanh;         // y = gelu(x, approximate=True)
//   int y = g.add(tk::graph::Op::Unary, {x}, at);
#pragma once
#include <cstdint>

// y = f(x), Keras 3's definitions (backends/math/unary.h). Parameters come from Attrs::fn_param: elu's alpha
// [0]; leaky_relu's negative slope [0]; clip's bounds [0, 1]. gelu is the exact form (Keras' default), gelu_tanh
// gelu(approximate=True); silu is swish; hard_sigmoid is relu6(x + 3) / 6 and hard_swish x * hard_sigmoid(x)
// (Keras 3's hard_silu).
// clang-format off
#define TK_UNARY_FNS(X)                                                                                            \
  X(exp) X(expm1) X(log) X(log1p) X(sqrt) X(rsqrt) X(square) X(abs) X(negative) X(sign) X(reciprocal) X(sin)        \
  X(cos) X(tanh) X(sigmoid) X(softplus) X(softsign) X(erf) X(gelu) X(gelu_tanh) X(silu) X(mish) X(hard_sigmoid)    \
  X(hard_swish) X(relu) X(relu6) X(selu) X(elu) X(leaky_relu) X(clip)
// clang-format on

// y = f(a, b) with NumPy broadcasting: arithmetic (Binary, the operands' dtype; maximum/minimum propagate NaN as
// NumPy and TensorFlow; floor_divide and mod are Python's // and %, rounding toward negative infinity) and
// comparisons (Compare, bool). Floats, and int32/int64 for all but divide (backends/math/binary.h).
#define TK_ARITHMETIC_FNS(X) \
  X(add) X(subtract) X(multiply) X(divide) X(maximum) X(minimum) X(power) X(squared_difference) X(floor_divide) X(mod)
#define TK_COMPARISON_FNS(X) X(equal) X(not_equal) X(less) X(less_equal) X(greater) X(greater_equal)

// Reductions over Attrs::axes (Reduce); ArgReduce takes max or min.
#define TK_REDUCE_FNS(X) X(sum) X(mean) X(max) X(min) X(prod) X(logsumexp)

namespace tk::graph {

#define TK_FN_ENUMERATOR(name) name,
enum class UnaryFn : uint8_t { TK_UNARY_FNS(TK_FN_ENUMERATOR) kCount };
enum class BinaryFn : uint8_t { TK_ARITHMETIC_FNS(TK_FN_ENUMERATOR) TK_COMPARISON_FNS(TK_FN_ENUMERATOR) kCount };
enum class ReduceFn : uint8_t { TK_REDUCE_FNS(TK_FN_ENUMERATOR) kCount };
#undef TK_FN_ENUMERATOR

inline constexpr int kUnaryFnCount = static_cast<int>(UnaryFn::kCount);
inline constexpr int kBinaryFnCount = static_cast<int>(BinaryFn::kCount);
inline constexpr int kReduceFnCount = static_cast<int>(ReduceFn::kCount);
constexpr bool is_comparison(BinaryFn f) { return f >= BinaryFn::equal && f < BinaryFn::kCount; }

// The highest rank the general ops take (broadcasting, transposes, reductions).
inline constexpr int kMaxRank = 8;

// Constrain's rule (Attrs::constraint; backends/math/constraints.h has the formulas): Keras' weight constraints.
enum class ConstraintKind : uint8_t { non_neg = 0, max_norm = 1, unit_norm = 2, min_max_norm = 3 };

}  // namespace tk::graph
