// keras.layers.RandomTranslation, RandomRotation and RandomZoom (Keras 3): in training programs each image of an
// (N, H, W, C) batch gets its own random affine transform, drawn per image (RandomUniform, keyed by the global sample
// as every trainkit draw) and applied by the AffineTransform op (graph/op.h: Keras' jax backend's
// map_coordinates, with its fill modes). The transforms are Keras' (…/image_preprocessing/random_*.py):
//   translation  [1, 0, -dx, 0, 1, -dy, 0, 0],  dx = u_w * W, dy = u_h * H   (u uniform in [lower, upper])
//   rotation     angle = u * 2 pi about the center ((W - 1) / 2, (H - 1) / 2)
//   zoom         [zw, 0, (W - 1) / 2 (1 - zw), 0, zh, (H - 1) / 2 (1 - zh), 0, 0],  z = 1 + u (zw = zh without
//                width_factor)
// evaluate and predict pass the images on (cast to the compute dtype, as Keras' image layers).
#include <cmath>

#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;
using layers::FactorRange;

enum class Kind { translation, rotation, zoom };

uint8_t fill_mode_of(const std::string& layer, const std::string& mode) {
  const char* modes[] = {"constant", "nearest", "wrap", "mirror", "reflect"};
  for (uint8_t i = 0; i < 5; ++i)
    if (mode == modes[i]) return i;
  throw InvalidArgument(layer + ": fill_mode \"" + mode +
                        "\" is not one of Keras' (reflect, wrap, constant, nearest, "
                        "mirror)");
}

class RandomAffineLayer final : public Layer {
 public:
  RandomAffineLayer(Kind kind, FactorRange h, std::optional<FactorRange> w, layers::RandomAffineOptions o)
      : Layer(kind == Kind::translation ? "random_translation"
              : kind == Kind::rotation  ? "random_rotation"
                                        : "random_zoom",
              o.name),
        kind_(kind),
        h_(h),
        w_(w),
        o_(std::move(o)) {
    const std::string who = class_name() + " '" + name + "'";
    for (const FactorRange* r : {&h_, w_ ? &*w_ : nullptr}) {
      if (!r) continue;
      if (!(r->lower <= r->upper && r->lower >= -1.0f && r->upper <= 1.0f) ||
          (kind_ == Kind::zoom && r->lower <= -1.0f))
        throw InvalidArgument(who + ": a factor must be a number or a (lower, upper) range within [-1, 1]" +
                              std::string(kind_ == Kind::zoom ? " (above -1 for a zoom)" : "") + ", got (" +
                              std::to_string(r->lower) + ", " + std::to_string(r->upper) + ")");
    }
    fill_ = fill_mode_of(who, o_.fill_mode);
    if (o_.interpolation != "bilinear" && o_.interpolation != "nearest")
      throw InvalidArgument(who + ": interpolation \"" + o_.interpolation +
                            "\" is not one of Keras' (bilinear, nearest)");
    if (o_.seed == 0) o_.seed = nn::next_seed();
  }
  std::string class_name() const override {
    return kind_ == Kind::translation ? "RandomTranslation" : kind_ == Kind::rotation ? "RandomRotation" : "RandomZoom";
  }
  LayerConfig get_config() const override {
    LayerConfig c;
    if (kind_ == Kind::rotation) {
      c.set_floats("factor", {h_.lower, h_.upper});
    } else {
      c.set_floats("height_factor", {h_.lower, h_.upper});
      if (w_) c.set_floats("width_factor", {w_->lower, w_->upper});
    }
    return c.set("fill_mode", o_.fill_mode)
        .set("interpolation", o_.interpolation)
        .set("seed", static_cast<int64_t>(o_.seed))
        .set_float("fill_value", o_.fill_value)
        .set("data_format", "channels_last");
  }
  Shape build(const std::vector<Shape>& in) override { return nn::check_images(*this, in[0]); }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const int x = nn::image_input(ctx, in[0], name);
    if (!ctx.training) return x;
    const Shape s = ctx.g[x].shape;
    const int64_t n = s[0];
    const float height = static_cast<float>(s[1]), width = static_cast<float>(s[2]);
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int draws = kind_ == Kind::rotation || (kind_ == Kind::zoom && !w_) ? 1 : 2;
    const int u = nn::random_values(ctx, graph::Op::RandomUniform, Shape{n, draws}, o_.seed, name + "/draw");
    auto uniform = [&](int k, const FactorRange& r) {  // Keras' uniform(minval, maxval): lower + (upper - lower) * u
      return ops::add_scalar(b, ops::mul_scalar(b, ops::slice(b, u, 1, k, 1), r.upper - r.lower), r.lower);
    };
    auto constant = [&](float v) { return ops::broadcast_to(b, ops::scalar(b, v, u), Shape{n, 1}); };
    auto mul = [&](int p, int q) { return ops::binary(b, graph::BinaryFn::multiply, p, q); };
    auto sub = [&](int p, int q) { return ops::binary(b, graph::BinaryFn::subtract, p, q); };
    std::vector<int> t;  // the 8 columns, each (N, 1)
    if (kind_ == Kind::translation) {
      const int dy = ops::mul_scalar(b, uniform(0, h_), height), dx = ops::mul_scalar(b, uniform(1, *w_), width);
      t = {constant(1), constant(0), ops::mul_scalar(b, dx, -1.0f),
           constant(0), constant(1), ops::mul_scalar(b, dy, -1.0f),
           constant(0), constant(0)};
    } else if (kind_ == Kind::rotation) {
      // Keras: degrees (factor * 360) to radians (pi / 180), about (cx, cy) = 0.5 * (size - 1)
      const int angle =
          ops::mul_scalar(b, ops::mul_scalar(b, uniform(0, h_), 360.0f), static_cast<float>(M_PI / 180.0));
      const int cos_t = ops::unary(b, graph::UnaryFn::cos, angle), sin_t = ops::unary(b, graph::UnaryFn::sin, angle);
      const float cx = 0.5f * (width - 1.0f), cy = 0.5f * (height - 1.0f);
      const int a0 = cos_t, a1 = ops::mul_scalar(b, sin_t, -1.0f), b0 = sin_t, b1 = cos_t;
      const int a2 = sub(sub(constant(cx), ops::mul_scalar(b, a0, cx)), ops::mul_scalar(b, a1, cy));
      const int b2 = sub(sub(constant(cy), ops::mul_scalar(b, b0, cx)), ops::mul_scalar(b, b1, cy));
      t = {a0, a1, a2, b0, b1, b2, constant(0), constant(0)};
    } else {
      const int zh = ops::add_scalar(b, uniform(0, h_), 1.0f);
      const int zw = w_ ? ops::add_scalar(b, uniform(1, *w_), 1.0f) : zh;
      const int x_off = mul(constant((width - 1.0f) / 2.0f), sub(constant(1), zw));
      const int y_off = mul(constant((height - 1.0f) / 2.0f), sub(constant(1), zh));
      t = {zw, constant(0), x_off, constant(0), zh, y_off, constant(0), constant(0)};
    }
    int transforms = ops::concat(b, t, 1);  // (N, 8)
    if (ctx.g[x].dtype != DType::f32) transforms = ctx.cast(transforms, ctx.g[x].dtype, name + "/cast_transforms");
    graph::Attrs at;
    at.bilinear = o_.interpolation == "bilinear";
    at.fill_mode = fill_;
    at.value = o_.fill_value;
    return ctx.g.add(graph::Op::AffineTransform, {x, transforms}, at, name + "/transform");
  }

 private:
  Kind kind_;
  FactorRange h_;
  std::optional<FactorRange> w_;
  layers::RandomAffineOptions o_;
  uint8_t fill_ = 4;
};

}  // namespace

LayerPtr layers::RandomTranslation(FactorRange height_factor, FactorRange width_factor, RandomAffineOptions options) {
  return std::make_shared<RandomAffineLayer>(Kind::translation, height_factor, width_factor, std::move(options));
}
LayerPtr layers::RandomRotation(FactorRange factor, RandomAffineOptions options) {
  return std::make_shared<RandomAffineLayer>(Kind::rotation, factor, std::nullopt, std::move(options));
}
LayerPtr layers::RandomZoom(FactorRange height_factor, std::optional<FactorRange> width_factor,
                            RandomAffineOptions options) {
  return std::make_shared<RandomAffineLayer>(Kind::zoom, height_factor, width_factor, std::move(options));
}

}  // namespace tk
