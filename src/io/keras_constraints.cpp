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
  auto number = [&](const char* k, float def) -> float {
    if (!c.contains(k) || c[k].is_null()) return def;
    if (!c[k].is_number()) o.bad(key, std::string("'s ") + k + " must be a number, got " + c[k].dump());
    return c[k].get<float>();
  };
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
  return {{"module", "keras.constraints"}, {"class_name", k.class_name()}, {"config", c}, {"registered_name", nullptr}};
}

}  // namespace

void read_constraints(Opts& o, const json& config, Layer& layer) {
  static const std::string kSuffix = "_constraint";
  for (const auto& [key, value] : config.items()) {
    if (key.size() <= kSuffix.size() || key.compare(key.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      continue;
    o.get(key);  // read: null is Keras' default
    if (value.is_null()) continue;
    layer.constraints[key.substr(0, key.size() - kSuffix.size())] = constraint_from_json(value, o, key);
  }
}

void write_constraints(json& config, const Layer& layer) {
  for (const auto& [key, c] : layer.constraints) config[key + "_constraint"] = constraint_json(c);
}

}  // namespace tk::io::keras
