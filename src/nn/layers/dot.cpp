// keras.layers.Dot(axes, normalize) (Keras 3's batch_dot, keras/src/layers/merging/dot.py): the dot product of two
// samples along one axis each. Two (N, d) inputs give (N, 1); two (N, A, B) inputs one BatchMatMul whose operands are
// transposed so the named axes meet: the output keeps the first input's other axis, then the second's
// ((N, A, B) . (N, C, B) along axes (2, 2) -> (N, A, C)). normalize=True first L2-normalizes each input along its axis
// as Keras' ops.normalize: x * min(rsqrt(sum(x^2)), 1 / 1e-7). Other ranks are an InvalidArgument naming the shapes.
#include <algorithm>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class DotLayer final : public Layer {
 public:
  DotLayer(std::vector<int64_t> axes, bool normalize, std::string n)
      : Layer("dot", std::move(n)), axes_(std::move(axes)), normalize_(normalize) {
    if (axes_.empty() || axes_.size() > 2)
      throw InvalidArgument("Dot '" + name + "': axes is one axis or a pair, got " + std::to_string(axes_.size()));
  }
  std::string class_name() const override { return "Dot"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    if (axes_.size() == 1)
      c.set("axes", axes_[0]);
    else
      c.set("axes", axes_);
    return c.set("normalize", normalize_);
  }
  int arity() const override { return -1; }
  Shape build(const std::vector<Shape>& in) override {
    const std::string owner = "Dot '" + name + "'";
    if (in.size() != 2) throw InvalidArgument(owner + ": takes exactly 2 inputs, got " + std::to_string(in.size()));
    const int rank = in[0].rank();
    if (in[1].rank() != rank || (rank != 2 && rank != 3))
      throw InvalidArgument(owner + ": takes two (batch, d) or two (batch, a, b) inputs, got " + in[0].to_string() +
                            " and " + in[1].to_string());
    const auto [a0, a1] = axes_for(rank);
    if (a0 < 1 || a0 >= rank || a1 < 1 || a1 >= rank)
      throw InvalidArgument(owner + ": axes must name axes after the batch axis of inputs of rank " +
                            std::to_string(rank));
    if (in[0][a0] != in[1][a1])
      throw InvalidArgument(owner + ": axis " + std::to_string(a0) + " of " + in[0].to_string() + " and axis " +
                            std::to_string(a1) + " of " + in[1].to_string() + " differ in size");
    if (rank == 2) return Shape{-1, 1};
    return Shape{-1, in[0][3 - a0], in[1][3 - a1]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int rank = ctx.g[in[0]].shape.rank();
    const auto [a0, a1] = axes_for(rank);
    int x = in[0], y = in[1];
    if (normalize_) x = l2_normalize(b, x, a0), y = l2_normalize(b, y, a1);
    if (rank == 2)
      return ops::reduce(b, graph::ReduceFn::sum, ops::binary(b, graph::BinaryFn::multiply, x, y), {1}, true);
    return ops::batch_matmul(b, x, y, /*trans_a=*/a0 == 1, /*trans_b=*/a1 == 2);
  }

 private:
  std::pair<int, int> axes_for(int rank) const {  // Keras: a negative axis is taken modulo the input's rank
    auto norm = [rank](int64_t a) { return static_cast<int>(a < 0 ? a + rank : a); };
    return {norm(axes_[0]), norm(axes_.size() == 2 ? axes_[1] : axes_[0])};
  }
  static int l2_normalize(graph::OpBuilder& b, int x, int axis) {
    const int sum_sq = ops::reduce(b, graph::ReduceFn::sum, ops::unary(b, graph::UnaryFn::square, x), {axis}, true);
    const int inv = ops::binary(b, graph::BinaryFn::minimum, ops::unary(b, graph::UnaryFn::rsqrt, sum_sq),
                                ops::scalar(b, 1e7f, sum_sq));
    return ops::binary(b, graph::BinaryFn::multiply, x, inv);
  }
  std::vector<int64_t> axes_;
  bool normalize_;
};

}  // namespace

LayerPtr layers::Dot(std::vector<int64_t> axes, bool normalize, std::string name) {
  return std::make_shared<DotLayer>(std::move(axes), normalize, std::move(name));
}

}  // namespace tk
