// Keras 3's TimeDistributed (keras/src/layers/rnn/time_distributed.py): one layer applied to every step of a
// (N, T, ...) input with the same weights. Keras loops over the static time axis; trainkit folds the steps into the
// batch, (N, T, ...) -> (N*T, ...), calls the layer once and unfolds its output to (N, T, ...): the same values for
// any layer whose rows do not see each other (Dense, Conv2D, pooling, Flatten, activations, Dropout). Layers that
// mix the rows of a batch (BatchNormalization's statistics) or read the step mask (recurrent layers, attention,
// 1-D global pooling) are refused. The Keras mask passes through, as Keras' supports_masking. Keras 3 files keep the
// wrapped layer's weights under layers/<name>/layer/vars.
#pragma once
#include <string>
#include <vector>

#include "nn/layers/context.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

class TimeDistributedLayer final : public Layer, public MaskSupport {
 public:
  TimeDistributedLayer(LayerPtr layer, std::string name);
  std::string class_name() const override { return "TimeDistributed"; }
  std::vector<KerasGroup> keras_groups() const override;
  Shape build(const std::vector<Shape>& input_shapes) override;
  int call(CallContext& ctx, const std::vector<int>& inputs) const override;
  const LayerPtr& layer() const { return layer_; }

 private:
  LayerPtr layer_;
};

}  // namespace tk::nn
