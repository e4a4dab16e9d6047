// What a layer sees while it emits graph ops for one program.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

struct CallContext {
  graph::Graph& g;
  bool training;               // dropout active; false in evaluate/predict programs
  DType compute = DType::f32;  // the dtype the layer being called computes in (its dtype policy)

  // The weight as the layer computes with it: its Variable cast to the compute dtype (one Variable node per
  // weight and one Cast per weight and dtype, however often layers are called).
  int variable(const Weight& w) {
    const int raw = raw_variable(w);
    if (compute == w.value.dtype()) return raw;
    auto it = casts.find({raw, compute});
    if (it != casts.end()) return it->second;
    const int id = g.cast(raw, compute, w.name + "/cast");
    casts.emplace(std::make_pair(raw, compute), id);
    return id;
  }
  // The weight's Variable itself (float32): what the optimizer updates and gradients are taken with respect to.
  int raw_variable(const Weight& w) {
    Tensor& t = storage ? storage(w) : const_cast<Tensor&>(w.value);
    auto it = vars.find(t.raw());
    if (it != vars.end()) return it->second;
    int id = g.variable(w.name, t);
    vars.emplace(t.raw(), id);
    return id;
  }
  // A value in `dtype`: itself, or one Cast per (value, dtype).
  int cast(int value, DType dtype, const std::string& name) {
    if (g[value].dtype == dtype) return value;
    auto it = casts.find({value, dtype});
    if (it != casts.end()) return it->second;
    const int id = g.cast(value, dtype, name);
    casts.emplace(std::make_pair(value, dtype), id);
    return id;
  }
  std::unordered_map<const void*, int> vars;
  std::map<std::pair<int, DType>, int> casts;
  std::vector<int> sinks;  // output-less ops a training program must run (BatchNormalization's moving statistics)
  // Where weights live when not in the Weight itself (a data-parallel replica's copies); null: Weight::value.
  std::function<Tensor&(const Weight&)> storage = nullptr;
  // Data parallel training programs: the replicas' group and this program's replica (null: one replica), whether the
  // program is one micro-batch's (its collectives would run once per micro-batch), and the collectives layers added.
  graph::Collective* collective = nullptr;
  int replica = 0;
  bool micro_batch = false;
  int64_t layer_collectives = 0;
  // The keyword options of the layer call being traced (KerasTensor::NodeData::call_options); null: none.
  const LayerConfig* call_options = nullptr;
  // The Keras masks of the inputs of the layer call being traced, one per input: a float32 0/1 (N, steps) value, or
  // -1 (MaskSupport below). Empty: no input has one.
  std::vector<int> input_masks = {};
  int input_mask(size_t i) const { return i < input_masks.size() ? input_masks[i] : -1; }
};

// Keras masks (nn/layers/masks.h): a float32 0/1 (batch, steps) value beside a layer output, made by
// Embedding(mask_zero=True) or Masking, read by the next layers from CallContext::input_masks. A layer class that
// supports masking (Keras' supports_masking) also derives from MaskSupport; the tracer drops the masks of the inputs
// of any other layer, as Keras does (with a warning there).
struct MaskSupport {
  virtual ~MaskSupport() = default;
  // Keras' compute_mask after the call emitted `output`: the output's mask value, or -1. By default the first
  // input's (Keras' previous_mask), as Dense, Dropout or LayerNormalization do.
  virtual int compute_mask(CallContext& ctx, const std::vector<int>& /*inputs*/, int /*output*/) const {
    return ctx.input_mask(0);
  }
};

// Collective numbers (graph/collective.h's `sequence`) of the collectives layers add in the forward and backward
// pass (synchronized BatchNormalization), apart from the gradient buckets' 0, 1, ...
inline constexpr int64_t kLayerCollectiveBase = int64_t{1} << 32;

// Activation by Keras name; "linear" (and "") emit nothing.
int apply_activation(CallContext& ctx, const std::string& activation, int x, const std::string& owner);
// Throws InvalidArgument listing the valid names.
void check_activation(const std::string& activation);

// std::make_shared<L>(args..., options) with options.dtype as its dtype policy (with_dtype), for the layer factories.
template <class L, class Options, class... Args>
LayerPtr make_with_dtype(Options options, Args&&... args) {
  const std::string dtype = options.dtype;
  return with_dtype(std::make_shared<L>(std::forward<Args>(args)..., std::move(options)), dtype);
}

// InvalidArgument "<Class> '<name>': <what> must be positive, got <v>" unless v > 0.
inline void check_positive(const Layer& l, const char* what, int64_t v) {
  if (v <= 0)
    throw InvalidArgument(l.class_name() + " '" + l.name + "': " + what + " must be positive, got " +
                          std::to_string(v));
}
// The attention layers' call options: the booleans use_causal_mask and training, and return_attention_scores=False;
// InvalidArgument "<Class> '<name>': call option '<key>' is not supported (trainkit takes use_causal_mask;
// <not_built>)" for any other.
inline void check_attention_call_options(const Layer& l, const LayerConfig& options, const char* not_built) {
  for (const auto& [key, v] : options.items) {
    if (v.kind == LayerConfig::Value::boolean &&
        (key == "use_causal_mask" || key == "training" || (key == "return_attention_scores" && !v.b)))
      continue;
    throw InvalidArgument(l.class_name() + " '" + l.name + "': call option '" + key +
                          "' is not supported (trainkit takes use_causal_mask; " + not_built + ")");
  }
}
// InvalidArgument "<Class> '<name>': <what> must be in [0, 1), got <v>" unless 0 <= v < 1 (a dropout rate).
inline void check_rate(const Layer& l, const char* what, float v) {
  if (!(v >= 0.0f && v < 1.0f))
    throw InvalidArgument(l.class_name() + " '" + l.name + "': " + what + " must be in [0, 1), got " +
                          std::to_string(v));
}

// Initializers by Keras name: glorot_uniform, glorot_normal, he_normal, he_uniform, lecun_normal,
// lecun_uniform, zeros, ones, random_normal, random_uniform, orthogonal.
void check_initializer(const std::string& name);
void initialize(Tensor& t, const std::string& name, int64_t fan_in, int64_t fan_out, uint64_t seed);

// The next seed from the global stream (tk::utils::set_random_seed).
uint64_t next_seed();
// "dense", "dense_1", ... unique per process until clear_session().
std::string unique_name(const std::string& prefix);

}  // namespace tk::nn
