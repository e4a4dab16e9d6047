// keras.layers.ActivityRegularization(l1, l2): passes its input on and adds l1 * sum(|x|) + l2 * sum(x^2), divided by
// the batch size, to the loss (its activity_regularizer, applied by the tracer: nn/compiler/regularization.h).
#include "nn/layers/context.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class ActivityRegularizationLayer final : public Layer, public nn::MaskSupport {
 public:
  ActivityRegularizationLayer(float l1, float l2, std::string n) : Layer("activity_regularization", std::move(n)) {
    activity_regularizer = regularizers::L1L2(l1, l2);
  }
  std::string class_name() const override { return "ActivityRegularization"; }
  LayerConfig get_config() const override {
    const Regularizer r = activity_regularizer.value_or(Regularizer{});
    return LayerConfig{}.set_float("l1", r.l1).set_float("l2", r.l2);
  }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext&, const std::vector<int>& in) const override { return in[0]; }
};

}  // namespace

LayerPtr layers::ActivityRegularization(float l1, float l2, std::string name) {
  return std::make_shared<ActivityRegularizationLayer>(l1, l2, std::move(name));
}

}  // namespace tk
