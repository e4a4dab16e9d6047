// Layers that only move values: Permute, RepeatVector, Identity (Keras 3), composites of the general ops.
#include <algorithm>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

// keras.layers.Permute(dims): dims is a permutation of 1..rank-1 (the batch axis stays first).
class PermuteLayer final : public Layer {
 public:
  PermuteLayer(std::vector<int64_t> dims, std::string n) : Layer("permute", std::move(n)), dims_(std::move(dims)) {
    std::vector<int64_t> sorted = dims_;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      if (sorted[i] != static_cast<int64_t>(i) + 1)
        throw InvalidArgument("Permute '" + name + "': dims must be a permutation of 1.." +
                              std::to_string(dims_.size()) + " (the batch axis 0 is not permuted)");
  }
  std::string class_name() const override { return "Permute"; }
  LayerConfig get_config() const override { return LayerConfig{}.set("dims", dims_); }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != static_cast<int>(dims_.size()) + 1)
      throw InvalidArgument("Permute '" + name + "': dims has " + std::to_string(dims_.size()) +
                            " entries but the input " + x.to_string() + " has " + std::to_string(x.rank() - 1) +
                            " axes after the batch");
    std::vector<int64_t> out{x[0]};
    for (int64_t d : dims_) out.push_back(x[static_cast<int>(d)]);
    return Shape(out);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    std::vector<int> perm{0};
    for (int64_t d : dims_) perm.push_back(static_cast<int>(d));
    return ops::transpose(b, in[0], perm);
  }

 private:
  std::vector<int64_t> dims_;
};

// keras.layers.RepeatVector(n): (N, F) -> (N, n, F).
class RepeatVectorLayer final : public Layer {
 public:
  RepeatVectorLayer(int64_t n, std::string nm) : Layer("repeat_vector", std::move(nm)), n_(n) {
    nn::check_positive(*this, "n", n_);
  }
  std::string class_name() const override { return "RepeatVector"; }
  LayerConfig get_config() const override { return LayerConfig{}.set("n", n_); }
  Shape build(const std::vector<Shape>& in) override {
    if (in[0].rank() != 2)
      throw InvalidArgument("RepeatVector '" + name + "': expects (batch, features), got " + in[0].to_string());
    return Shape{in[0][0], n_, in[0][1]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    return ops::tile(b, ops::expand_dims(b, in[0], 1), {1, n_, 1});
  }

 private:
  int64_t n_;
};

// keras.layers.Identity: returns its input.
class IdentityLayer final : public Layer, public nn::MaskSupport {
 public:
  explicit IdentityLayer(std::string n) : Layer("identity", std::move(n)) {}
  std::string class_name() const override { return "Identity"; }
  LayerConfig get_config() const override { return {}; }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext&, const std::vector<int>& in) const override { return in[0]; }
};

}  // namespace

namespace layers {
LayerPtr Permute(std::vector<int64_t> dims, std::string name) {
  return std::make_shared<PermuteLayer>(std::move(dims), std::move(name));
}
LayerPtr RepeatVector(int64_t n, std::string name) { return std::make_shared<RepeatVectorLayer>(n, std::move(name)); }
LayerPtr Identity(std::string name) { return std::make_shared<IdentityLayer>(std::move(name)); }
}  // namespace layers

}  // namespace tk
