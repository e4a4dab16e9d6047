// What a layer sees while it emits graph ops for one program.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "trainkit/nn/layer.h"

namespace tk::nn {

struct CallContext {
  graph::Graph& g;
  bool training;  // dropout active; false in evaluate/predict programs

  // The graph value of a weight (one Variable node per weight, however often the layer is called).
  int variable(const Weight& w) {
    auto it = vars.find(w.value.raw());
    if (it != vars.end()) return it->second;
    int id = g.variable(w.name, const_cast<Tensor&>(w.value));
    vars.emplace(w.value.raw(), id);
    return id;
  }
  std::unordered_map<const void*, int> vars;
  std::vector<int> sinks;  // output-less ops a training program must run (BatchNormalization's moving statistics)
};

// Activation by Keras name; "linear" (and "") emit nothing.
int apply_activation(CallContext& ctx, const std::string& activation, int x, const std::string& owner);
// Throws InvalidArgument listing the valid names.
void check_activation(const std::string& activation);

// Initializers by Keras name: glorot_uniform, glorot_normal, he_normal, he_uniform, lecun_normal,
// lecun_uniform, zeros, ones, random_normal, random_uniform.
void check_initializer(const std::string& name);
void initialize(Tensor& t, const std::string& name, int64_t fan_in, int64_t fan_out, uint64_t seed);

// The next seed from the global stream (tk::utils::set_random_seed).
uint64_t next_seed();
// "dense", "dense_1", ... unique per process until clear_session().
std::string unique_name(const std::string& prefix);

}  // namespace tk::nn
