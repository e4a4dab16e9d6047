// Flatten and Reshape: (None, ...) -> (None, ...target), one -1 in the target inferred.
#include <optional>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class ReshapeLayer final : public Layer {
 public:
  ReshapeLayer(std::string prefix, std::optional<Shape> target, std::string n)
      : Layer(std::move(prefix), std::move(n)), target_(std::move(target)) {}
  std::string class_name() const override { return target_ ? "Reshape" : "Flatten"; }
  LayerConfig get_config() const override {
    if (!target_) return LayerConfig{}.set("data_format", std::string("channels_last"));
    std::vector<int64_t> dims;
    for (int i = 0; i < target_->rank(); ++i) dims.push_back((*target_)[i]);
    return LayerConfig{}.set("target_shape", dims);
  }
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

}  // namespace

namespace layers {
LayerPtr Flatten(std::string name) { return std::make_shared<ReshapeLayer>("flatten", std::nullopt, std::move(name)); }
LayerPtr Reshape(Shape target_shape, std::string name) {
  return std::make_shared<ReshapeLayer>("reshape", std::move(target_shape), std::move(name));
}
}  // namespace layers

}  // namespace tk
