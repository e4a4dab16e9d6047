#include "trainkit/nn/models.h"

#include "trainkit/core/error.h"

namespace tk::models {

std::unique_ptr<Sequential> tutorial_cnn(Shape input, int64_t classes, float input_scale) {
  using namespace layers;
  if (input.rank() != 2 && input.rank() != 3)
    throw InvalidArgument("tutorial_cnn: input must be (height, width) or (height, width, channels), got " +
                          input.to_string());
  std::vector<LayerPtr> l{layers::Input(input)};
  if (input_scale != 1.0f) l.push_back(Rescaling(input_scale));
  if (input.rank() == 2) l.push_back(Reshape(Shape{input[0], input[1], 1}));
  for (LayerPtr p :
       {Conv2D(32, 5, "relu", {.padding = "same"}), MaxPooling2D(2), Conv2D(64, 5, "relu", {.padding = "same"}),
        MaxPooling2D(2), Flatten(), Dense(1024, "relu"), Dropout(0.4f), Dense(classes)})
    l.push_back(p);
  return std::make_unique<Sequential>(l, "tutorial_cnn");
}

}  // namespace tk::models
