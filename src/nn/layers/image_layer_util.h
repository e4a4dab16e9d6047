// Helpers shared by the image layers (channels_last), Conv1D and the sequence layers: input checks, padding names,
// window attributes.
#pragma once
#include <string>
#include <tuple>
#include <vector>

#include "graph/op.h"
#include "graph/window.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk::nn {

inline const Shape& image_input(const Layer& l, const std::vector<Shape>& in) {
  if (in[0].rank() != 4 || !in[0].sample_shape().fully_known())
    throw InvalidArgument(l.class_name() + " '" + l.name + "': expects (batch, height, width, channels), got " +
                          in[0].to_string() + " (add a Reshape, e.g. Reshape({28, 28, 1}) for grayscale images)");
  return in[0];
}

// A sequence layer's input: (batch, steps, channels) with known steps and channels, or InvalidArgument.
inline const Shape& sequence_input(const Layer& l, const std::vector<Shape>& in) {
  if (in[0].rank() != 3 || !in[0].sample_shape().fully_known())
    throw InvalidArgument(l.class_name() + " '" + l.name + "': expects (batch, steps, channels), got " +
                          in[0].to_string());
  return in[0];
}

// check_positive (nn/layers/context.h) for both values of a Size2.
inline void check_positive(const Layer& l, const char* what, layers::Size2 s) {
  if (s.h <= 0 || s.w <= 0)
    throw InvalidArgument(l.class_name() + " '" + l.name + "': " + what + " must be positive, got (" +
                          std::to_string(s.h) + ", " + std::to_string(s.w) + ")");
}

// build()'s channel check: true on the first build (in_channels set to x's last axis, the weights to add), false
// after it; InvalidArgument when x's channels differ from the built ones.
inline bool first_build(const Layer& l, bool built, int64_t& in_channels, const Shape& x) {
  if (built && x[-1] != in_channels)
    throw InvalidArgument(l.class_name() + " '" + l.name + "' was built for " + std::to_string(in_channels) +
                          " channels, called on " + x.to_string());
  if (!built) in_channels = x[-1];
  return !built;
}

// A convolution's window options, checked as Keras checks them: kernel_size, strides and dilation_rate positive, and
// not strides > 1 together with dilation_rate > 1.
inline void check_conv_window(const Layer& l, layers::Size2 k, layers::Size2 strides, layers::Size2 dilation) {
  check_positive(l, "kernel_size", k);
  check_positive(l, "strides", strides);
  check_positive(l, "dilation_rate", dilation);
  if ((strides.h > 1 || strides.w > 1) && (dilation.h > 1 || dilation.w > 1))
    throw InvalidArgument(l.class_name() + " '" + l.name +
                          "': strides > 1 together with dilation_rate > 1 is not supported (as Keras)");
}

inline bool parse_padding(const Layer& l, const std::string& p) {
  if (p == "same") return true;
  if (p == "valid") return false;
  throw InvalidArgument(l.class_name() + " '" + l.name + "': padding must be \"valid\" or \"same\", got \"" + p + "\"");
}

// Window attributes for an input of shape x (batch None).
inline graph::Attrs window_attrs(const Shape& x, layers::Size2 k, layers::Size2 s, layers::Size2 d, bool same) {
  graph::Attrs a;
  a.kernel[0] = k.h, a.kernel[1] = k.w, a.stride[0] = s.h, a.stride[1] = s.w, a.dilation[0] = d.h, a.dilation[1] = d.w;
  if (same) {
    std::tie(a.pad[0], a.pad[1]) = graph::same_padding(x[1], k.h, s.h, d.h);
    std::tie(a.pad[2], a.pad[3]) = graph::same_padding(x[2], k.w, s.w, d.w);
  }
  return a;
}

inline Shape window_output(const Layer& l, const Shape& x, const graph::Attrs& a, int64_t channels) {
  graph::Window w = graph::Window::of(x.with_batch(1), a);
  if (w.oh <= 0 || w.ow <= 0)
    throw InvalidArgument(l.class_name() + " '" + l.name + "': window " + std::to_string(a.kernel[0]) + "x" +
                          std::to_string(a.kernel[1]) + " does not fit input " + x.to_string() +
                          " (use padding=\"same\")");
  return Shape{-1, w.oh, w.ow, channels};
}

}  // namespace tk::nn
