// Activation: a named activation as a layer (the names are in activation.cpp).
#include "nn/layers/context.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class ActivationLayer final : public Layer, public nn::MaskSupport {
 public:
  ActivationLayer(std::string activation, std::string n)
      : Layer("activation", std::move(n)), activation_(std::move(activation)) {
    nn::check_activation(activation_);
  }
  std::string class_name() const override { return "Activation"; }
  LayerConfig get_config() const override { return LayerConfig{}.set("activation", activation_); }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return nn::apply_activation(ctx, activation_, in[0], name);
  }

 private:
  std::string activation_;
};

}  // namespace

namespace layers {
LayerPtr Activation(std::string activation, std::string name) {
  return std::make_shared<ActivationLayer>(std::move(activation), std::move(name));
}
}  // namespace layers

}  // namespace tk
