// BatchNormalization over the last (channel) axis (axis -1 or rank - 1): batch statistics in training, moving ones
// otherwise.
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class BatchNormLayer final : public Layer, public nn::MaskSupport {
 public:
  explicit BatchNormLayer(layers::BatchNormalizationOptions o)
      : Layer("batch_normalization", o.name), o_(std::move(o)) {
    if (!(o_.momentum >= 0.0f && o_.momentum <= 1.0f))
      throw InvalidArgument("BatchNormalization '" + name + "': momentum must be in [0, 1], got " +
                            std::to_string(o_.momentum));
    if (!(o_.epsilon > 0.0f))
      throw InvalidArgument("BatchNormalization '" + name + "': epsilon must be > 0, got " +
                            std::to_string(o_.epsilon));
  }
  std::string class_name() const override { return "BatchNormalization"; }
  // Keras' BatchNormalization passes the mask on and, in training, takes the batch moments over the unmasked steps
  // only: that is not built, so training on a masked input is refused (inference uses the moving statistics alike).
  LayerConfig get_config() const override {
    LayerConfig c = LayerConfig{}
                        .set("axis", int64_t{o_.axis})  // as given: a Keras file's axis=3 stays 3
                        .set_float("momentum", o_.momentum)
                        .set_float("epsilon", o_.epsilon)
                        .set("center", true)
                        .set("scale", true)
                        .set("beta_initializer", std::string("zeros"))
                        .set("gamma_initializer", std::string("ones"))
                        .set("moving_mean_initializer", std::string("zeros"))
                        .set("moving_variance_initializer", std::string("ones"));
    // Keras 3 takes synchronized=; the Keras that wrote tests/fixtures/keras does not save it: written when true only.
    if (o_.synchronized) c.set("synchronized", true);
    return c;
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() < 2 || x[-1] <= 0)
      throw InvalidArgument("BatchNormalization '" + name + "': needs a known last (channel) axis, got " +
                            x.to_string());
    check_axis(x);
    if (!built_) {
      const Shape c{x[-1]};
      add_weight("gamma", c, "ones");
      add_weight("beta", c, "zeros");
      add_weight("moving_mean", c, "zeros", false);
      add_weight("moving_variance", c, "ones", false);
    } else if (weights_[0].value.dim(0) != x[-1]) {
      throw InvalidArgument("BatchNormalization '" + name + "' was built for " +
                            std::to_string(weights_[0].value.dim(0)) + " channels, called on " + x.to_string());
    }
    return x;
  }
  bool computes_in_float32() const override { return true; }  // statistics in float32, as Keras
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (ctx.training && ctx.input_mask(0) >= 0)
      throw Unsupported("BatchNormalization '" + name +
                        "': training on an input with a Keras mask (Keras takes the "
                        "batch moments over the unmasked steps) is not supported");
    Attrs a;
    a.momentum = o_.momentum;
    a.epsilon = o_.epsilon;
    const int gamma = ctx.variable(weights_[0]), beta = ctx.variable(weights_[1]);
    const int mean = ctx.variable(weights_[2]), var = ctx.variable(weights_[3]);
    if (!ctx.training || !trainable)  // Keras 3: a frozen BatchNormalization runs in inference mode
      return ctx.g.add(Op::BnInference, {in[0], mean, var, gamma, beta}, a, name);
    if (o_.synchronized && ctx.collective) {  // the global batch's statistics: BnStats and BnInputGrad all-reduce
      if (ctx.micro_batch)
        throw InvalidArgument(
            "BatchNormalization '" + name +
            "' (synchronized=True) cannot run in micro-batches under a distribution strategy: its statistics would "
            "be summed per micro-batch across the replicas, not over the global batch (set micro_batch_size = 0, "
            "lower the batch size so that a replica's share fits without micro-batching, or use synchronized=False)");
      a.collective = ctx.collective;
      a.replica = ctx.replica;
      a.begin = nn::kLayerCollectiveBase + ctx.layer_collectives;  // BnStats: begin, begin + 1; BnInputGrad: + 2
      ctx.layer_collectives += 3;
    }
    const int stats = ctx.g.add(Op::BnStats, {in[0]}, a, name + "/moments");
    ctx.sinks.push_back(ctx.g.add(Op::BnUpdateMoving, {stats, mean, var}, a, name + "/update_moving"));
    return ctx.g.add(Op::BnApply, {in[0], stats, gamma, beta}, a, name);
  }

 private:
  // The axis resolved against the input's rank: -1 and rank - 1 both name the last axis, the only one trainkit
  // normalizes over (its kernels view the input as (M, C), channels last).
  void check_axis(const Shape& x) const {
    const int rank = x.rank();
    const int resolved = o_.axis < 0 ? o_.axis + rank : o_.axis;
    if (resolved == rank - 1) return;
    throw Unsupported("BatchNormalization '" + name + "': axis=" + std::to_string(o_.axis) + " on input " +
                      x.to_string() + " (rank " + std::to_string(rank) +
                      ") is not the last axis (trainkit normalizes over the last, channel axis only: use axis=-1 or " +
                      std::to_string(rank - 1) + ", e.g. axis=3 for channels_last images (N, H, W, C))");
  }

  layers::BatchNormalizationOptions o_;
};

}  // namespace

namespace layers {
LayerPtr BatchNormalization(BatchNormalizationOptions o) { return std::make_shared<BatchNormLayer>(std::move(o)); }
}  // namespace layers

}  // namespace tk
