// Keras 3 learning-rate schedules <-> nn/schedules.h: an optimizer's `learning_rate` in a .keras config.json is a
// number or, for `Adam(learning_rate=keras.optimizers.schedules.CosineDecay(...))`, the schedule's serialized object:
//   {"module": "keras.optimizers.schedules", "class_name": "CosineDecay",
//    "config": {"initial_learning_rate": 0.001, "decay_steps": 100, "alpha": 0.0, "name": "CosineDecay",
//               "warmup_target": null, "warmup_steps": 0}, "registered_name": null}
// Every key Keras writes for the five schedules trainkit has is read or checked; CosineDecayRestarts and custom
// schedules are refused by name.
#include <cmath>
#include <variant>

#include "io/keras_internal.h"
#include "nn/schedule_options.h"
#include "trainkit/core/error.h"

namespace tk::io::keras {

namespace s = optimizers::schedules;

namespace {

class Reader {
 public:
  Reader(const json& config, std::string where) : c_(config), where_(std::move(where)) {}

  float number(const char* key, std::optional<float> def = std::nullopt) const {
    const json* v = find(key);
    if (!v || v->is_null()) {
      if (def) return *def;
      throw FormatError(where_ + ": '" + key + "' is missing (a number)");
    }
    if (!v->is_number() || !std::isfinite(v->get<double>()) || std::abs(v->get<double>()) > 3.4e38)
      throw FormatError(where_ + ": '" + key + "' must be a finite float32 number, got " + v->dump());
    return static_cast<float>(v->get<double>());
  }
  std::optional<float> optional_number(const char* key) const {
    const json* v = find(key);
    if (!v || v->is_null()) return std::nullopt;
    return number(key);
  }
  int64_t integer(const char* key, std::optional<int64_t> def = std::nullopt) const {
    const json* v = find(key);
    if (!v || v->is_null()) {
      if (def) return *def;
      throw FormatError(where_ + ": '" + key + "' is missing (a whole number of steps)");
    }
    return whole(*v, key);
  }
  bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (!v || v->is_null()) return def;
    if (!v->is_boolean()) throw FormatError(where_ + ": '" + key + "' must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::vector<int64_t> steps(const char* key) const {
    std::vector<int64_t> out;
    for (const json& e : array(key)) out.push_back(whole(e, key));
    return out;
  }
  std::vector<float> numbers(const char* key) const {
    std::vector<float> out;
    for (const json& e : array(key)) {
      if (!e.is_number() || !std::isfinite(e.get<double>()) || std::abs(e.get<double>()) > 3.4e38)
        throw FormatError(where_ + ": '" + key + "' must hold finite float32 numbers, got " + e.dump());
      out.push_back(static_cast<float>(e.get<double>()));
    }
    return out;
  }

 private:
  const json& array(const char* key) const {
    const json* v = find(key);
    if (!v || !v->is_array()) throw FormatError(where_ + ": '" + key + "' must be a list");
    return *v;
  }
  // Keras keeps what the user passed: 1000 or 1000.0.
  int64_t whole(const json& v, const char* key) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    const double d = v.is_number() ? v.get<double>() : 0.5;
    if (!v.is_number() || d != std::floor(d) || std::abs(d) > 9.0e15)
      throw FormatError(where_ + ": '" + key + "' must be a whole number of steps, got " + v.dump());
    return static_cast<int64_t>(d);
  }
  const json* find(const char* key) const {
    auto it = c_.find(key);
    return it == c_.end() ? nullptr : &*it;
  }
  const json& c_;
  std::string where_;
};

}  // namespace

s::LearningRateSchedulePtr schedule_from_json(const json& j, const std::string& label) {
  if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string())
    throw FormatError(label +
                      ": compile_config: the optimizer's learning_rate must be a number or a serialized "
                      "keras.optimizers.schedules object, got " +
                      j.dump());
  const std::string cls = j["class_name"].get<std::string>();
  const std::string where = label + ": compile_config: learning_rate schedule " + cls;
  if (j.contains("registered_name") && !j["registered_name"].is_null() && j["registered_name"] != cls)
    throw Unsupported(where + " is a custom schedule (registered as " + j["registered_name"].dump() +
                      "): trainkit has ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay, InverseTimeDecay "
                      "and CosineDecay");
  const json config = j.value("config", json::object());
  const Reader r(config, where);
  try {
    if (cls == "ExponentialDecay" || cls == "InverseTimeDecay") {
      s::ExponentialDecayOptions o;
      o.initial_learning_rate = r.number("initial_learning_rate");
      o.decay_steps = r.integer("decay_steps");
      o.decay_rate = r.number("decay_rate");
      o.staircase = r.boolean("staircase", false);
      return cls == "ExponentialDecay" ? s::ExponentialDecay(o) : s::InverseTimeDecay(o);
    }
    if (cls == "PiecewiseConstantDecay") return s::PiecewiseConstantDecay(r.steps("boundaries"), r.numbers("values"));
    if (cls == "PolynomialDecay") {
      s::PolynomialDecayOptions o;
      o.initial_learning_rate = r.number("initial_learning_rate");
      o.decay_steps = r.integer("decay_steps");
      o.end_learning_rate = r.number("end_learning_rate", o.end_learning_rate);
      o.power = r.number("power", o.power);
      o.cycle = r.boolean("cycle", false);
      return s::PolynomialDecay(o);
    }
    if (cls == "CosineDecay") {
      s::CosineDecayOptions o;
      o.initial_learning_rate = r.number("initial_learning_rate");
      o.decay_steps = r.integer("decay_steps");
      o.alpha = r.number("alpha", 0.0f);
      o.warmup_target = r.optional_number("warmup_target");
      o.warmup_steps = r.integer("warmup_steps", 0);
      return s::CosineDecay(o);
    }
  } catch (const InvalidArgument& e) {  // the schedule's own checks (decay_steps > 0, ...)
    throw FormatError(where + ": " + e.what());
  }
  throw Unsupported(where +
                    " is not one trainkit has (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay, "
                    "InverseTimeDecay, CosineDecay)");
}

json schedule_to_json(const s::LearningRateSchedule& schedule, const std::string& label) {
  const std::optional<s::ScheduleOptions> options = s::schedule_options(schedule);
  if (!options)
    throw Unsupported(label + ": the optimizer's learning-rate schedule '" + schedule.name() +
                      "' is not one of trainkit's (nn/schedules.h), so a Keras file cannot hold it");
  const std::string cls = schedule.name();
  json config;
  if (const auto* o = std::get_if<s::ExponentialDecayOptions>(&*options)) {
    config = {{"initial_learning_rate", float_json(o->initial_learning_rate)},
              {"decay_steps", o->decay_steps},
              {"decay_rate", float_json(o->decay_rate)},
              {"staircase", o->staircase}};
  } else if (const auto* p = std::get_if<s::PiecewiseConstantOptions>(&*options)) {
    json values = json::array();
    for (float v : p->values) values.push_back(float_json(v));
    config = {{"boundaries", p->boundaries}, {"values", values}};
  } else if (const auto* q = std::get_if<s::PolynomialDecayOptions>(&*options)) {
    config = {{"initial_learning_rate", float_json(q->initial_learning_rate)},
              {"decay_steps", q->decay_steps},
              {"end_learning_rate", float_json(q->end_learning_rate)},
              {"power", float_json(q->power)},
              {"cycle", q->cycle}};
  } else {
    const auto& c = std::get<s::CosineDecayOptions>(*options);
    config = {{"initial_learning_rate", float_json(c.initial_learning_rate)},
              {"decay_steps", c.decay_steps},
              {"alpha", float_json(c.alpha)},
              {"warmup_target", c.warmup_target ? float_json(*c.warmup_target) : json(nullptr)},
              {"warmup_steps", c.warmup_steps}};
  }
  config["name"] = cls == "PiecewiseConstantDecay" ? "PiecewiseConstant" : cls;  // Keras' default names
  return keras_object_json("keras.optimizers.schedules", cls, config);
}

}  // namespace tk::io::keras
