// Keras' weight constraints in layer configs (trainkit/nn/constraints.h): {"module": "keras.constraints",
// "class_name": "MaxNorm", "config": {"max_value": 2.0, "axis": 0}, ...} or a name ("max_norm"), read onto
// Layer::constraints and written back as Keras writes them.
#include <string>
#include <vector>

#include "io/keras_opts.h"
#include "trainkit/nn/constraints.h"

namespace tk::io::keras {
namespace {

Constraint constraint_from_json(const json& v, Opts& o, const std::string& key) {
  const auto [cls, c] = o.keras_object(v, key, "a constraint object");
  auto number = [&](const char* k, float def) { return o.object_number(c, key, k, def); };
  auto axis = [&]() -> std::vector<int> {  // Keras' axis: an int or a list of ints (default 0)
    if (!c.contains("axis") || c["axis"].is_null()) return {0};
    const json& a = c["axis"];
    if (a.is_number_integer()) return {a.get<int>()};
    std::vector<int> axes;
    if (a.is_array())
      for (const json& e : a) {
        if (!e.is_number_integer()) o.bad(key, "'s axis must be an int or a list of ints, got " + a.dump());
        axes.push_back(e.get<int>());
      }
    else
      o.bad(key, "'s axis must be an int or a list of ints, got " + a.dump());
    return axes;
  };
  try {
    if (cls == "NonNeg" || cls == "non_neg") return constraints::NonNeg();
    if (cls == "MaxNorm" || cls == "max_norm") return constraints::MaxNorm(number("max_value", 2.0f), axis());
    if (cls == "UnitNorm" || cls == "unit_norm") return constraints::UnitNorm(axis());
    if (cls == "MinMaxNorm" || cls == "min_max_norm")
      return constraints::MinMaxNorm(number("min_value", 0.0f), number("max_value", 1.0f), number("rate", 1.0f),
                                     axis());
  } catch (const InvalidArgument& e) {
    o.bad(key, e.what());
  }
  o.unsupported(key, "constraints: NonNeg, MaxNorm, UnitNorm, MinMaxNorm");
}

json constraint_json(const Constraint& k) {
  json c = json::object();
  const json axis = k.axis.size() == 1 ? json(k.axis[0]) : json(k.axis);
  switch (k.kind) {
    case Constraint::Kind::non_neg:
      break;
    case Constraint::Kind::max_norm:
      c = {{"max_value", float_json(k.max_value)}, {"axis", axis}};
      break;
    case Constraint::Kind::unit_norm:
      c = {{"axis", axis}};
      break;
    case Constraint::Kind::min_max_norm:
      c = {{"min_value", float_json(k.min_value)},
           {"max_value", float_json(k.max_value)},
           {"rate", float_json(k.rate)},
           {"axis", axis}};
      break;
  }
  return keras_object_json("keras.constraints", k.class_name(), c);
}

}  // namespace

void read_constraints(Opts& o, Layer& layer) {
  o.each_suffixed("_constraint", [&](const std::string& key, const std::string& prefix, const json& value) {
    layer.constraints[prefix] = constraint_from_json(value, o, key);
  });
}

void write_constraints(json& config, const Layer& layer) {
  for (const auto& [key, c] : layer.constraints) config[key + "_constraint"] = constraint_json(c);
}

}  // namespace tk::io::keras
