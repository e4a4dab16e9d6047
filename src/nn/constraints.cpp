// Keras' weight constraints (trainkit/nn/constraints.h): the factories, which weight of a layer a key names, and the
// Constrain node a training program runs after a weight's update (nn/compiler/constraint_ops.h).
#include "trainkit/nn/constraints.h"

#include <string>
#include <utility>

#include "nn/compiler/constraint_ops.h"
#include "nn/weight_options.h"
#include "trainkit/core/error.h"

namespace tk {
std::string Constraint::class_name() const {
  switch (kind) {
    case Kind::non_neg:
      return "NonNeg";
    case Kind::max_norm:
      return "MaxNorm";
    case Kind::unit_norm:
      return "UnitNorm";
    case Kind::min_max_norm:
      return "MinMaxNorm";
  }
  return "?";
}

Constraint constraints::NonNeg() { return Constraint{}; }
Constraint constraints::MaxNorm(float max_value, std::vector<int> axis) {
  return {.kind = Constraint::Kind::max_norm,
          .max_value = nn::finite_non_negative(max_value, "constraints", "MaxNorm", "max_value"),
          .axis = std::move(axis)};
}
Constraint constraints::UnitNorm(std::vector<int> axis) {
  return {.kind = Constraint::Kind::unit_norm, .axis = std::move(axis)};
}
Constraint constraints::MinMaxNorm(float min_value, float max_value, float rate, std::vector<int> axis) {
  Constraint c;
  c.kind = Constraint::Kind::min_max_norm;
  c.min_value = nn::finite_non_negative(min_value, "constraints", "MinMaxNorm", "min_value");
  c.max_value = nn::finite_non_negative(max_value, "constraints", "MinMaxNorm", "max_value");
  if (c.min_value > c.max_value)
    throw InvalidArgument("constraints.MinMaxNorm: min_value " + std::to_string(min_value) + " is above max_value " +
                          std::to_string(max_value));
  if (!(rate >= 0.0f && rate <= 1.0f))
    throw InvalidArgument("constraints.MinMaxNorm: rate must be in [0, 1], got " + std::to_string(rate));
  c.rate = rate;
  c.axis = std::move(axis);
  return c;
}

const Constraint* Layer::constraint_of(const Weight& w) const { return nn::option_of(*this, constraints, w); }

namespace nn {

void check_constraint_keys(const Layer& layer) {
  check_option_keys(layer, layer.constraints, "constraints", "constraint");
}

int emit_constraint(graph::Graph& g, const Constraint& c, int var, const Weight& w) {
  graph::Attrs at;
  at.constraint = static_cast<uint8_t>(c.kind == Constraint::Kind::non_neg     ? graph::ConstraintKind::non_neg
                                       : c.kind == Constraint::Kind::max_norm  ? graph::ConstraintKind::max_norm
                                       : c.kind == Constraint::Kind::unit_norm ? graph::ConstraintKind::unit_norm
                                                                               : graph::ConstraintKind::min_max_norm);
  at.norm_min = c.min_value;
  at.norm_max = c.max_value;
  at.norm_rate = c.rate;
  const int rank = g[var].shape.rank();
  if (c.kind != Constraint::Kind::non_neg)
    for (int a : c.axis) {
      const int axis = a < 0 ? a + rank : a;
      if (axis < 0 || axis >= rank)
        throw InvalidArgument("weight '" + w.name + "' " + g[var].shape.to_string() + ": its " + c.class_name() +
                              " constraint's axis " + std::to_string(a) + " is outside the weight's rank " +
                              std::to_string(rank) +
                              " (Keras' axis counts the weight's axes: 0 for a Dense kernel's "
                              "inputs, [0, 1, 2] for a Conv2D kernel's window and input channels)");
      at.axes |= 1u << axis;
    }
  return g.add(graph::Op::Constrain, {var}, at, w.name + "/constraint");
}

}  // namespace nn
}  // namespace tk
