// Layers without weights: InputLayer, Activation, Dropout, Flatten, Reshape, Add, Concatenate.
#include <optional>

#include "nn/layers/context.h"
#include "nn/layers/input_layer.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace nn {

InputLayer::InputLayer(Shape sample_shape, std::string given) : Layer("input_layer", std::move(given)) {
  std::vector<int64_t> dims{-1};
  for (int64_t d : sample_shape.dims()) {
    if (d <= 0)
      throw InvalidArgument("Input '" + name + "': shape " + sample_shape.to_string() +
                            " must have positive dimensions");
    dims.push_back(d);
  }
  batch_shape = Shape(std::move(dims));
  built_ = true;
}

KerasTensor input_tensor(std::shared_ptr<InputLayer> layer) {
  auto node = std::make_shared<KerasTensor::NodeData>();
  node->shape = layer->batch_shape;
  node->layer = std::move(layer);
  return KerasTensor{node};
}

int InputLayer::call(CallContext&, const std::vector<int>&) const {
  throw InvalidArgument("InputLayer '" + name + "' cannot be called");
}

}  // namespace nn

namespace {

class ActivationLayer final : public Layer {
 public:
  ActivationLayer(std::string activation, std::string n)
      : Layer("activation", std::move(n)), activation_(std::move(activation)) {
    nn::check_activation(activation_);
  }
  std::string class_name() const override { return "Activation"; }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return nn::apply_activation(ctx, activation_, in[0], name);
  }

 private:
  std::string activation_;
};

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(float rate, uint64_t seed, std::string n) : Layer("dropout", std::move(n)), rate_(rate), seed_(seed) {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw InvalidArgument("Dropout '" + name + "': rate must be in [0, 1), got " + std::to_string(rate));
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "Dropout"; }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    graph::Attrs at;
    at.alpha = rate_;
    at.seed = seed_;
    at.shape = ctx.g[in[0]].shape;
    int mask = ctx.g.add(graph::Op::DropoutMask, {}, at, name + "/mask");
    return ctx.g.add(graph::Op::Mul, {in[0], mask}, {}, name + "/apply");
  }

 private:
  float rate_;
  uint64_t seed_;
};

class ReshapeLayer final : public Layer {
 public:
  ReshapeLayer(std::string prefix, std::optional<Shape> target, std::string n)
      : Layer(std::move(prefix), std::move(n)), target_(std::move(target)) {}
  std::string class_name() const override { return target_ ? "Reshape" : "Flatten"; }
  Shape build(const std::vector<Shape>& in) override { return infer(in[0]); }
  // (None, ...) -> (None, ...target), with one -1 in the target inferred.
  Shape infer(const Shape& input) const {
    const std::vector<Shape> in{input};
    Shape sample = in[0].sample_shape();
    if (!sample.fully_known())
      throw InvalidArgument(class_name() + " '" + name + "': input shape " + in[0].to_string() + " is not fully known");
    const int64_t n = sample.numel();
    std::vector<int64_t> out{-1};
    if (!target_) {
      out.push_back(n);
    } else {
      int64_t known = 1, unknown = -1;
      for (int i = 0; i < target_->rank(); ++i) {
        if ((*target_)[i] == -1 && unknown < 0)
          unknown = i;
        else if ((*target_)[i] <= 0)
          throw InvalidArgument("Reshape '" + name + "': bad target shape " + target_->to_string());
        else
          known *= (*target_)[i];
      }
      std::vector<int64_t> dims = target_->dims();
      if (unknown >= 0) dims[static_cast<size_t>(unknown)] = known > 0 && n % known == 0 ? n / known : -1;
      int64_t total = 1;
      for (int64_t d : dims) total *= d;
      if (total != n)
        throw InvalidArgument("Reshape '" + name + "': cannot reshape input " + in[0].to_string() + " (" +
                              std::to_string(n) + " values per sample) to " + target_->to_string());
      out.insert(out.end(), dims.begin(), dims.end());
    }
    return Shape(std::move(out));
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const Shape& s = ctx.g[in[0]].shape;
    graph::Attrs at;
    std::vector<int64_t> dims{s[0]};
    if (!target_) {
      dims.push_back(s.numel() / (s[0] ? s[0] : 1));
    } else {
      Shape out = infer(s.with_batch(-1));
      for (int i = 1; i < out.rank(); ++i) dims.push_back(out[i]);
    }
    at.shape = Shape(std::move(dims));
    return ctx.g.add(graph::Op::Reshape, {in[0]}, at, name);
  }

 private:
  std::optional<Shape> target_;
};

class MergeLayer final : public Layer {
 public:
  MergeLayer(bool concat, int axis, std::string n)
      : Layer(concat ? "concatenate" : "add", std::move(n)), concat_(concat), axis_(axis) {}
  std::string class_name() const override { return concat_ ? "Concatenate" : "Add"; }
  int arity() const override { return -1; }
  Shape build(const std::vector<Shape>& in) override {
    Shape out = in[0];
    if (concat_) {
      const int last = out.rank() - 1;
      if (axis_ != -1 && axis_ != last)
        throw Unsupported("Concatenate '" + name + "': only the last axis (-1) is supported, got axis " +
                          std::to_string(axis_));
      out[-1] = 0;
    }
    for (const Shape& s : in) {
      bool ok = s.rank() == out.rank();
      for (int i = 1; ok && i < s.rank(); ++i) ok = (concat_ && i == s.rank() - 1) || s[i] == in[0][i];
      if (!ok) {
        std::string all;
        for (const Shape& t : in) all += (all.empty() ? "" : ", ") + t.to_string();
        throw InvalidArgument(class_name() + " '" + name + "': incompatible input shapes " + all +
                              (concat_ ? " (all but the last axis must match)" : " (all must match)"));
      }
      if (concat_) out[-1] += s[-1];
    }
    return out;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return ctx.g.add(concat_ ? graph::Op::Concat : graph::Op::Add, in, {}, name);
  }

 private:
  bool concat_;
  int axis_;
};

}  // namespace

namespace {
std::shared_ptr<nn::InputLayer> make_input(Shape shape, std::string name) {
  return std::make_shared<nn::InputLayer>(std::move(shape), std::move(name));
}
}  // namespace

KerasTensor Input(Shape shape, std::string name) {
  return nn::input_tensor(make_input(std::move(shape), std::move(name)));
}

namespace layers {
LayerPtr Input(Shape shape, std::string name) { return make_input(std::move(shape), std::move(name)); }
LayerPtr Activation(std::string activation, std::string name) {
  return std::make_shared<ActivationLayer>(std::move(activation), std::move(name));
}
LayerPtr Dropout(float rate, uint64_t seed, std::string name) {
  return std::make_shared<DropoutLayer>(rate, seed, std::move(name));
}
LayerPtr Flatten(std::string name) { return std::make_shared<ReshapeLayer>("flatten", std::nullopt, std::move(name)); }
LayerPtr Reshape(Shape target_shape, std::string name) {
  return std::make_shared<ReshapeLayer>("reshape", std::move(target_shape), std::move(name));
}
LayerPtr Add(std::string name) { return std::make_shared<MergeLayer>(false, -1, std::move(name)); }
LayerPtr Concatenate(int axis, std::string name) { return std::make_shared<MergeLayer>(true, axis, std::move(name)); }
}  // namespace layers

}  // namespace tk
