// The merge layers: Concatenate (last axis), and the elementwise Add, Subtract, Multiply, Average, Maximum, Minimum
// with Keras 3's broadcasting (keras/src/layers/merging/base_merge.py): an input of lower rank gets size-1 axes
// inserted after the batch axis, then the shapes broadcast as NumPy's (EfficientNet's squeeze-and-excitation
// multiplies (N, H, W, C) by (N, 1, 1, C)). Equal shapes sum through the one Add op; the rest are the general
// Binary ops, chained left to right as Keras does (output = op(output, inputs[i])).
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

enum class Merge { add, subtract, multiply, average, maximum, minimum, concatenate };

// Each kind's Keras class, default-name prefix and elementwise op (Average sums, then divides; Concatenate has none),
// in Merge's order.
struct MergeKind {
  const char* class_name;
  const char* prefix;
  graph::BinaryFn fn;
};
constexpr MergeKind kKinds[] = {{"Add", "add", graph::BinaryFn::add},
                                {"Subtract", "subtract", graph::BinaryFn::subtract},
                                {"Multiply", "multiply", graph::BinaryFn::multiply},
                                {"Average", "average", graph::BinaryFn::add},
                                {"Maximum", "maximum", graph::BinaryFn::maximum},
                                {"Minimum", "minimum", graph::BinaryFn::minimum},
                                {"Concatenate", "concatenate", graph::BinaryFn::add}};
const MergeKind& kind_of(Merge m) { return kKinds[static_cast<size_t>(m)]; }

class MergeLayer final : public Layer, public nn::MaskSupport {
 public:
  MergeLayer(Merge kind, int axis, std::string n)
      : Layer(kind_of(kind).prefix, std::move(n)), kind_(kind), axis_(axis) {}
  std::string class_name() const override { return kind_of(kind_).class_name; }
  LayerConfig get_config() const override {
    return kind_ == Merge::concatenate ? LayerConfig{}.set("axis", static_cast<int64_t>(axis_)) : LayerConfig{};
  }
  int arity() const override { return -1; }
  // Keras' merge layers: the output's mask is the OR of the inputs' masks, or none when an input has none.
  // Concatenate's mask (ones for unmasked inputs, per axis) and Maximum/Minimum's masked values are not built.
  int compute_mask(nn::CallContext& ctx, const std::vector<int>& in, int) const override {
    if (ctx.input_masks.empty()) return -1;
    if (kind_ == Merge::concatenate || kind_ == Merge::maximum || kind_ == Merge::minimum)
      throw Unsupported(class_name() + " '" + name + "': inputs with Keras masks are not supported (only Add, " +
                        "Subtract, Multiply and Average merge masks)");
    int mask = ctx.input_mask(0);
    graph::OpBuilder b{ctx.g, nullptr, name + "/mask"};
    for (size_t i = 1; i < in.size() && mask >= 0; ++i)
      mask = ctx.input_mask(i) < 0 ? -1 : nn::masks::logical_or(b, mask, ctx.input_mask(i));
    return mask;
  }
  Shape build(const std::vector<Shape>& in) override {
    if (in.size() < 2 || (kind_ == Merge::subtract && in.size() != 2))
      throw InvalidArgument(class_name() + " '" + name + "': takes " +
                            (kind_ == Merge::subtract ? "exactly 2 inputs" : "at least 2 inputs") + ", got " +
                            std::to_string(in.size()));
    return kind_ == Merge::concatenate ? build_concat(in) : build_elementwise(in);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (kind_ == Merge::concatenate) return ctx.g.add(graph::Op::Concat, in, {}, name);
    bool same = true;
    for (int x : in) same = same && ctx.g[x].shape == ctx.g[in[0]].shape;
    if (kind_ == Merge::add && same) return ctx.g.add(graph::Op::Add, in, {}, name);
    graph::OpBuilder b{ctx.g, nullptr, name};
    int rank = 0;
    for (int x : in) rank = std::max(rank, ctx.g[x].shape.rank());
    auto expanded = [&](int x) {  // Keras: expand_dims(x, axis=1) until the highest rank
      while (ctx.g[x].shape.rank() < rank) x = graph::ops::expand_dims(b, x, 1);
      return x;
    };
    int out = expanded(in[0]);
    for (size_t i = 1; i < in.size(); ++i) out = graph::ops::binary(b, kind_of(kind_).fn, out, expanded(in[i]));
    if (kind_ == Merge::average)
      out = graph::ops::binary(b, graph::BinaryFn::divide, out,
                               graph::ops::scalar(b, static_cast<float>(in.size()), out));
    return out;
  }

 private:
  std::string shapes(const std::vector<Shape>& in) const {
    std::string all;
    for (const Shape& t : in) all += (all.empty() ? "" : ", ") + t.to_string();
    return all;
  }
  Shape build_concat(const std::vector<Shape>& in) const {
    Shape out = in[0];
    const int last = out.rank() - 1;
    if (axis_ != -1 && axis_ != last)
      throw Unsupported("Concatenate '" + name + "': only the last axis (-1) is supported, got axis " +
                        std::to_string(axis_));
    out[-1] = 0;
    for (const Shape& s : in) {
      bool ok = s.rank() == out.rank();
      for (int i = 1; ok && i < s.rank(); ++i) ok = i == s.rank() - 1 || s[i] == in[0][i];
      if (!ok)
        throw InvalidArgument("Concatenate '" + name + "': incompatible input shapes " + shapes(in) +
                              " (all but the last axis must match)");
      out[-1] += s[-1];
    }
    return out;
  }
  // Keras' _compute_elemwise_op_output_shape after the rank expansion: per axis, 1 broadcasts, otherwise equal.
  Shape build_elementwise(const std::vector<Shape>& in) const {
    int rank = 0;
    for (const Shape& s : in) rank = std::max(rank, s.rank());
    auto expand = [&](const Shape& s) {
      std::vector<int64_t> d(s.dims().begin(), s.dims().end());
      while (static_cast<int>(d.size()) < rank) d.insert(d.begin() + 1, 1);
      return d;
    };
    std::vector<int64_t> out = expand(in[0]);
    for (size_t k = 1; k < in.size(); ++k) {
      const std::vector<int64_t> s = expand(in[k]);
      for (size_t i = 1; i < out.size(); ++i) {
        if (out[i] == 1) {
          out[i] = s[i];
        } else if (s[i] != 1 && s[i] != out[i]) {
          throw InvalidArgument(class_name() + " '" + name + "': incompatible input shapes " + shapes(in) +
                                " (each axis after the batch must match or be 1; lower ranks get axes of size 1 "
                                "after the batch axis, as in Keras)");
        }
      }
    }
    return Shape(out);
  }

  Merge kind_;
  int axis_;
};

}  // namespace

namespace layers {
LayerPtr Add(std::string name) { return std::make_shared<MergeLayer>(Merge::add, -1, std::move(name)); }
LayerPtr Subtract(std::string name) { return std::make_shared<MergeLayer>(Merge::subtract, -1, std::move(name)); }
LayerPtr Multiply(std::string name) { return std::make_shared<MergeLayer>(Merge::multiply, -1, std::move(name)); }
LayerPtr Average(std::string name) { return std::make_shared<MergeLayer>(Merge::average, -1, std::move(name)); }
LayerPtr Maximum(std::string name) { return std::make_shared<MergeLayer>(Merge::maximum, -1, std::move(name)); }
LayerPtr Minimum(std::string name) { return std::make_shared<MergeLayer>(Merge::minimum, -1, std::move(name)); }
LayerPtr Concatenate(int axis, std::string name) {
  return std::make_shared<MergeLayer>(Merge::concatenate, axis, std::move(name));
}
}  // namespace layers

}  // namespace tk
