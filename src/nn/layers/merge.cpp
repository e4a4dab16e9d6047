// Add and Concatenate (last axis): layers over several inputs.
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class MergeLayer final : public Layer {
 public:
  MergeLayer(bool concat, int axis, std::string n)
      : Layer(concat ? "concatenate" : "add", std::move(n)), concat_(concat), axis_(axis) {}
  std::string class_name() const override { return concat_ ? "Concatenate" : "Add"; }
  LayerConfig get_config() const override {
    return concat_ ? LayerConfig{}.set("axis", static_cast<int64_t>(axis_)) : LayerConfig{};
  }
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

namespace layers {
LayerPtr Add(std::string name) { return std::make_shared<MergeLayer>(false, -1, std::move(name)); }
LayerPtr Concatenate(int axis, std::string name) { return std::make_shared<MergeLayer>(true, axis, std::move(name)); }
}  // namespace layers

}  // namespace tk
