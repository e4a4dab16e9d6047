// Model::summary in Keras 3's layout.
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "nn/layers/input_layer.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

std::string pad(const std::string& s, size_t w, bool right = false) {
  // Box-drawing characters count as one column each but take 3 bytes; only ASCII is padded here.
  if (s.size() >= w) return s.substr(0, w);
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string repeat(const char* s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

void Model::summary(std::ostream& os) const {
  const_cast<Model*>(this)->ensure_built({});
  const bool sequential = dynamic_cast<const Sequential*>(this) != nullptr;
  // Output shape of each layer: from the symbolic graph.
  std::map<const Layer*, std::string> shapes;  // a layer with several outputs: Keras' list "[(None, 6), (None, 6)]"
  std::set<const KerasTensor::NodeData*> seen;
  std::function<void(const KerasTensor&)> walk = [&](const KerasTensor& t) {
    if (!seen.insert(t.node.get()).second) return;
    std::string list;
    for (const Shape& s : t.node->shapes) list += (list.empty() ? "" : ", ") + s.to_string();
    shapes[t.node->layer.get()] = t.node->shapes.size() == 1 ? list : "[" + list + "]";
    for (const KerasTensor& x : t.node->inputs) walk(x);
  };
  for (const KerasTensor& in : inputs_) shapes[in.node->layer.get()] = in.shape().to_string();
  for (const KerasTensor& o : outputs_) walk(o);

  const size_t w1 = 33, w2 = 24, w3 = 15;
  os << "Model: \"" << name_ << "\"\n";
  os << "┏" << repeat("━", w1) << "┳" << repeat("━", w2) << "┳" << repeat("━", w3) << "┓\n";
  os << "┃ " << pad("Layer (type)", w1 - 1) << "┃ " << pad("Output Shape", w2 - 1) << "┃ "
     << pad("Param #", w3 - 2, true) << " ┃\n";
  os << "┡" << repeat("━", w1) << "╇" << repeat("━", w2) << "╇" << repeat("━", w3) << "┩\n";
  int64_t trainable = 0, frozen = 0;
  bool first = true;
  std::set<const Model*> nested_shown;
  for (const LayerPtr& l : layers_) {
    const bool is_input = dynamic_cast<const nn::InputLayer*>(l.get()) != nullptr;
    for (const Weight& w : l->weights()) (l->trainable && w.trainable ? trainable : frozen) += w.value.numel();
    if (sequential && is_input) continue;
    const Model* inner = nested_model_of(*l);
    if (inner && !nested_shown.insert(inner).second) continue;  // a nested model is one row, as in Keras
    if (!first) os << "├" << repeat("─", w1) << "┼" << repeat("─", w2) << "┼" << repeat("─", w3) << "┤\n";
    first = false;
    std::string label, shape = "?";
    int64_t params = 0;
    if (inner) {
      bool any_trainable = false;
      for (const LayerPtr& m : inner->layers()) {
        params += m->count_params();
        any_trainable = any_trainable || (m->trainable && !m->weights().empty());
      }
      label = inner->name() + " (" + (dynamic_cast<const Sequential*>(inner) ? "Sequential" : "Functional") + ")" +
              (any_trainable || params == 0 ? "" : " [frozen]");
      shape = inner->outputs().size() == 1 ? inner->outputs()[0].shape().to_string() : "(several)";
    } else {
      label = l->name + " (" + l->class_name() + ")" + (l->trainable || l->weights().empty() ? "" : " [frozen]");
      auto it = shapes.find(l.get());
      if (it != shapes.end()) shape = it->second;
      params = l->count_params();
    }
    os << "│ " << pad(label, w1 - 1) << "│ " << pad(shape, w2 - 1) << "│ " << pad(with_commas(params), w3 - 2, true)
       << " │\n";
  }
  os << "└" << repeat("─", w1) << "┴" << repeat("─", w2) << "┴" << repeat("─", w3) << "┘\n";
  os << " Total params: " << with_commas(trainable + frozen) << " (" << human_bytes(4.0 * double(trainable + frozen))
     << ")\n";
  os << " Trainable params: " << with_commas(trainable) << " (" << human_bytes(4.0 * double(trainable)) << ")\n";
  os << " Non-trainable params: " << with_commas(frozen) << " (" << human_bytes(4.0 * double(frozen)) << ")\n";
  // Mixed precision: the policy, and the layers that compute in float32 under it, with the reason.
  std::string policies, exceptions;
  for (const LayerPtr& l : layers_) {
    if (dynamic_cast<const nn::InputLayer*>(l.get())) continue;
    const std::string p = layer_dtype_policy(*l);
    if (p != "float32" && policies.find(p) == std::string::npos) policies += (policies.empty() ? "" : ", ") + p;
    std::string why;
    if (p != "float32" && layer_compute_dtype(*l, &why) == DType::f32)
      exceptions += "\n   " + l->name + " computes in float32: " + why;
    else if (p == "float32" && l->has_own_dtype_policy() && dtype_policy_ != "float32")
      exceptions += "\n   " + l->name + " computes in float32: its own dtype policy";
  }
  if (!policies.empty())
    os << " Dtype policy: " << policies << " (float32 weights and optimizer state, 16-bit activations)" << exceptions
       << "\n";
  // Data parallel: the strategy and its replicas (each holds a copy of the weights and optimizer state).
  if (!distribute_strategy().empty()) os << " Distribute strategy: " << distribute_strategy() << "\n";
}

}  // namespace tk
