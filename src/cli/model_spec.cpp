#include "cli/model_spec.h"

#include <charconv>

#include "cli/data_source.h"
#include "trainkit/core/error.h"

namespace tk::cli {
namespace {

template <typename T>
bool parse_number(const std::string& s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::vector<LayerPtr> parse_model_spec(const std::string& spec) {
  std::vector<LayerPtr> layers;
  const std::vector<std::string> items = split(spec, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const std::vector<std::string> f = split(items[i], ':');
    auto fail = [&](const std::string& why) -> InvalidArgument {
      return InvalidArgument("--model item " + std::to_string(i + 1) + " ('" + items[i] + "'): " + why +
                             " (expected dense:UNITS[:ACTIVATION], conv2d:FILTERS:KERNEL[:ACTIVATION[:PADDING]], "
                             "dwconv2d:KERNEL[:ACTIVATION[:PADDING[:MULTIPLIER]]], "
                             "sepconv2d:FILTERS:KERNEL[:ACTIVATION[:PADDING]], "
                             "maxpool[:SIZE], avgpool[:SIZE], globalavgpool, globalmaxpool, batchnorm[:sync], "
                             "dropout:RATE, activation:NAME, relu[:MAX_VALUE], leakyrelu[:SLOPE], elu[:ALPHA], prelu, "
                             "softmax[:AXIS], flatten, embedding:INPUT_DIM:OUTPUT_DIM, "
                             "conv1d:FILTERS:KERNEL[:ACTIVATION[:PADDING]], maxpool1d[:SIZE], avgpool1d[:SIZE], "
                             "globalavgpool1d, globalmaxpool1d, lstm:UNITS[:seq], gru:UNITS[:seq], "
                             "simplernn:UNITS[:seq], bilstm:UNITS[:seq], bigru:UNITS[:seq], gaussian_noise:STDDEV, "
                             "gaussian_dropout:RATE, random_flip[:MODE], random_contrast:FACTOR, "
                             "random_translation:HEIGHT_FACTOR:WIDTH_FACTOR, random_rotation:FACTOR, "
                             "random_zoom:HEIGHT_FACTOR[:WIDTH_FACTOR], "
                             "center_crop:HEIGHT:WIDTH or resizing:HEIGHT:WIDTH[:nearest], separated by commas)");
    };
    auto positive = [&](size_t k, const char* what) {
      int64_t v = 0;
      if (k >= f.size() || !parse_number(f[k], v) || v <= 0) throw fail(std::string(f[0]) + " needs " + what);
      return v;
    };
    auto arguments = [&](size_t least, size_t most) {
      if (f.size() - 1 < least || f.size() - 1 > most)
        throw fail(f[0] + (most == 0
                               ? " takes no arguments"
                               : " takes " + std::to_string(least) + " to " + std::to_string(most) + " arguments"));
    };
    try {
      const std::string& kind = f[0];
      if (kind == "dense") {
        int64_t units = 0;
        if (f.size() < 2 || f.size() > 3 || !parse_number(f[1], units) || units <= 0)
          throw fail("dense needs a positive unit count");
        layers.push_back(layers::Dense(units, f.size() == 3 ? f[2] : "linear"));
      } else if (kind == "conv2d" || kind == "sepconv2d" || kind == "conv1d") {
        arguments(2, 4);
        const int64_t filters = positive(1, "a positive filter count");
        const int64_t kernel = positive(2, "a positive kernel size");
        const std::string activation = f.size() >= 4 ? f[3] : "linear";
        auto padded = [&](auto options) {  // the layer's options, with PADDING when given
          if (f.size() == 5) options.padding = f[4];
          return options;
        };
        if (kind == "conv2d")
          layers.push_back(layers::Conv2D(filters, layers::Size2(kernel), activation, padded(layers::Conv2DOptions{})));
        else if (kind == "sepconv2d")
          layers.push_back(layers::SeparableConv2D(filters, layers::Size2(kernel), activation,
                                                   padded(layers::SeparableConv2DOptions{})));
        else
          layers.push_back(layers::Conv1D(filters, kernel, activation, padded(layers::Conv1DOptions{})));
      } else if (kind == "dwconv2d") {
        arguments(1, 4);
        layers::DepthwiseConv2DOptions o;
        const int64_t kernel = positive(1, "a positive kernel size");
        if (f.size() >= 4) o.padding = f[3];
        if (f.size() == 5) o.depth_multiplier = positive(4, "a positive depth multiplier");
        layers.push_back(layers::DepthwiseConv2D(layers::Size2(kernel), f.size() >= 3 ? f[2] : "linear", o));
      } else if (kind == "maxpool" || kind == "avgpool") {
        arguments(0, 1);
        const int64_t size = f.size() == 2 ? positive(1, "a positive pool size") : 2;
        layers.push_back(kind == "maxpool" ? layers::MaxPooling2D(layers::Size2(size))
                                           : layers::AveragePooling2D(layers::Size2(size)));
      } else if (kind == "globalavgpool" || kind == "globalmaxpool") {
        arguments(0, 0);
        layers.push_back(kind == "globalavgpool" ? layers::GlobalAveragePooling2D() : layers::GlobalMaxPooling2D());
      } else if (kind == "batchnorm") {
        arguments(0, 1);
        if (f.size() == 2 && f[1] != "sync") throw fail("batchnorm takes only 'sync' (synchronized over replicas)");
        layers.push_back(layers::BatchNormalization({.synchronized = f.size() == 2}));
      } else if (kind == "dropout") {
        float rate = 0;
        if (f.size() != 2 || !parse_number(f[1], rate)) throw fail("dropout needs a rate");
        layers.push_back(layers::Dropout(rate));
      } else if (kind == "activation") {
        if (f.size() != 2) throw fail("activation needs a name");
        layers.push_back(layers::Activation(f[1]));
      } else if (kind == "embedding") {
        arguments(2, 2);
        layers.push_back(layers::Embedding(positive(1, "a positive input_dim (the vocabulary size)"),
                                           positive(2, "a positive output_dim")));
      } else if (kind == "maxpool1d" || kind == "avgpool1d") {
        arguments(0, 1);
        const int64_t size = f.size() == 2 ? positive(1, "a positive pool size") : 2;
        layers.push_back(kind == "maxpool1d" ? layers::MaxPooling1D(size) : layers::AveragePooling1D(size));
      } else if (kind == "globalavgpool1d" || kind == "globalmaxpool1d") {
        arguments(0, 0);
        layers.push_back(kind == "globalavgpool1d" ? layers::GlobalAveragePooling1D() : layers::GlobalMaxPooling1D());
      } else if (kind == "lstm" || kind == "gru" || kind == "simplernn" || kind == "bilstm" || kind == "bigru") {
        // UNITS[:seq]: seq keeps every step's output (return_sequences) for a following recurrent or 1D layer
        arguments(1, 2);
        const int64_t units = positive(1, "a positive unit count");
        if (f.size() == 3 && f[2] != "seq") throw fail(kind + " takes only 'seq' (return_sequences) after the units");
        const bool seq = f.size() == 3;
        LayerPtr rnn = kind == "gru" || kind == "bigru" ? layers::GRU(units, {.return_sequences = seq})
                       : kind == "simplernn"            ? layers::SimpleRNN(units, {.return_sequences = seq})
                                                        : layers::LSTM(units, {.return_sequences = seq});
        layers.push_back(kind.rfind("bi", 0) == 0 ? layers::Bidirectional(rnn) : rnn);
      } else if (kind == "relu" || kind == "leakyrelu" || kind == "elu") {
        // relu[:MAX_VALUE] (relu:6 is MobileNetV2's ReLU(6.0)), leakyrelu[:NEGATIVE_SLOPE], elu[:ALPHA]
        arguments(0, 1);
        float v = 0;
        if (f.size() == 2 && !parse_number(f[1], v)) throw fail(kind + " takes a number");
        if (kind == "relu")
          layers.push_back(f.size() == 2 ? layers::ReLU({.max_value = v}) : layers::ReLU());
        else if (kind == "leakyrelu")
          layers.push_back(layers::LeakyReLU(f.size() == 2 ? v : 0.3f));
        else
          layers.push_back(layers::ELU(f.size() == 2 ? v : 1.0f));
      } else if (kind == "prelu") {
        arguments(0, 0);
        layers.push_back(layers::PReLU());
      } else if (kind == "softmax") {
        arguments(0, 1);
        int axis = -1;
        if (f.size() == 2 && !parse_number(f[1], axis)) throw fail("softmax takes an integer axis");
        layers.push_back(layers::Softmax(axis));
      } else if (kind == "flatten") {
        arguments(0, 0);
        layers.push_back(layers::Flatten());
      } else if (kind == "gaussian_noise" || kind == "gaussian_dropout" || kind == "random_contrast") {
        float v = 0;
        if (f.size() != 2 || !parse_number(f[1], v))
          throw fail(kind + (kind == "gaussian_noise"     ? " needs a stddev"
                             : kind == "gaussian_dropout" ? " needs a rate"
                                                          : " needs a factor"));
        layers.push_back(kind == "gaussian_noise"     ? layers::GaussianNoise(v)
                         : kind == "gaussian_dropout" ? layers::GaussianDropout(v)
                                                      : layers::RandomContrast(v));
      } else if (kind == "random_flip") {
        arguments(0, 1);
        layers.push_back(layers::RandomFlip(f.size() == 2 ? f[1] : "horizontal_and_vertical"));
      } else if (kind == "center_crop") {
        arguments(2, 2);
        layers.push_back(layers::CenterCrop(positive(1, "a positive height"), positive(2, "a positive width")));
      } else if (kind == "random_translation" || kind == "random_rotation" || kind == "random_zoom") {
        const size_t wanted = kind == "random_translation" ? 2 : 1;
        arguments(wanted, kind == "random_zoom" ? 2 : wanted);
        std::vector<float> v(f.size() - 1);
        for (size_t k = 1; k < f.size(); ++k)
          if (!parse_number(f[k], v[k - 1]))
            throw fail(kind + " takes numbers (factors, as Keras'), got '" + f[k] + "'");
        if (kind == "random_translation")
          layers.push_back(layers::RandomTranslation(v[0], v[1]));
        else if (kind == "random_rotation")
          layers.push_back(layers::RandomRotation(v[0]));
        else
          layers.push_back(v.size() == 2 ? layers::RandomZoom(v[0], layers::FactorRange(v[1]))
                                         : layers::RandomZoom(v[0]));
      } else if (kind == "resizing") {
        arguments(2, 3);
        layers::ResizingOptions r;
        if (f.size() == 4) r.interpolation = f[3];
        layers.push_back(layers::Resizing(positive(1, "a positive height"), positive(2, "a positive width"), r));
      } else {
        throw fail("unknown layer '" + kind + "'");
      }
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (what.rfind("--model", 0) == 0) throw;
      throw fail(what);
    }
  }
  if (layers.empty()) throw InvalidArgument("--model is empty");
  return layers;
}

bool model_spec_takes_images(const std::vector<LayerPtr>& layers) {
  if (layers.empty()) return false;
  const std::string c = layers.front()->class_name();
  return c == "Conv2D" || c == "DepthwiseConv2D" || c == "SeparableConv2D" || c == "MaxPooling2D" ||
         c == "AveragePooling2D" || c == "GlobalAveragePooling2D" || c == "GlobalMaxPooling2D" || c == "RandomFlip" ||
         c == "RandomContrast" || c == "CenterCrop" || c == "Resizing" || c == "RandomTranslation" ||
         c == "RandomRotation" || c == "RandomZoom";
}

bool model_spec_takes_tokens(const std::vector<LayerPtr>& layers) {
  return !layers.empty() && layers.front()->class_name() == "Embedding";
}

}  // namespace tk::cli
