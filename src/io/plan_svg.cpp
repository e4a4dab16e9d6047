// MemoryPlan::svg: the memory plan as a picture. Steps across, bytes up, in the order the step's memory is
// laid out: weights, optimizer slots, the arena (each planned value a box at its offset over its lifetime),
// the workspace; a dashed line at the peak and a marker at the step where the arena holds the most.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "trainkit/nn/memory_plan.h"
#include "trainkit/runtime/memory.h"

namespace tk {
namespace {

constexpr double kLeft = 90, kTop = 40, kPlotW = 900, kPlotH = 520, kLegendW = 260;

std::string escaped(const std::string& s) {
  static const std::map<char, std::string_view> kEntities = {
      {'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}, {'\'', "&apos;"}};
  std::string out;
  for (char c : s) {
    const auto it = kEntities.find(c);
    if (it == kEntities.end())
      out += c;
    else
      out += it->second;
  }
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// Distinct hues for layers, in layer order (golden-angle steps around the color wheel).
std::string layer_color(size_t index) {
  char b[32];
  std::snprintf(b, sizeof b, "hsl(%d,65%%,55%%)", static_cast<int>(static_cast<double>(index) * 137.508) % 360);
  return b;
}

}  // namespace

std::string MemoryPlan::svg() const {
  using config::format_bytes;
  const double total_bytes = static_cast<double>(std::max<size_t>(total, 1));
  const double y_scale = kPlotH / total_bytes;
  const int first_step = -1, last_step = std::max(steps, 1);  // inputs live from before step 0 to `steps`
  const double x_scale = kPlotW / double(last_step - first_step + 1);
  auto x_of = [&](int step) { return kLeft + (step - first_step) * x_scale; };
  auto y_of = [&](double bytes) { return kTop + kPlotH - bytes * y_scale; };  // bytes from the bottom

  std::map<std::string, size_t> color_index;
  for (const LayerMemory& l : layers) color_index.emplace(l.layer, color_index.size());
  auto color = [&](const std::string& layer) {
    auto it = color_index.find(layer);
    return it == color_index.end() ? std::string("#9e9e9e") : layer_color(it->second);
  };

  const double width = kLeft + kPlotW + 20 + kLegendW, height = kTop + kPlotH + 60;
  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<title>Memory plan of one training step, batch size " + std::to_string(batch_size) + "</title>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(kLeft) + "\" y=\"22\" font-size=\"15\">Memory plan of one training step, batch size " +
       std::to_string(batch_size) + ": peak " + escaped(format_bytes(total)) + "</text>\n";

  // Bands: weights, optimizer state (persistent), then the arena region, then the workspace.
  const double arena_base = static_cast<double>(weights + optimizer_state);
  auto band = [&](const char* cls, const char* label, double from, double bytes, const char* fill) {
    if (bytes <= 0) return;
    s += "<rect class=\"band\" data-band=\"" + std::string(cls) + "\" x=\"" + num(kLeft) + "\" y=\"" +
         num(y_of(from + bytes)) + "\" width=\"" + num(kPlotW) + "\" height=\"" + num(bytes * y_scale) + "\" fill=\"" +
         fill + "\" stroke=\"#555\" stroke-width=\"0.5\"><title>" + label + ": " +
         escaped(format_bytes(static_cast<size_t>(bytes))) + "</title></rect>\n";
  };
  band("weights", "weights (persistent)", 0, double(weights), "#d7e3f4");
  band("optimizer_state", "optimizer slots (persistent)", double(weights), double(optimizer_state), "#e8dcf2");
  band("arena", "arena (inputs, activations, gradients)", arena_base, double(arena), "#f7f7f7");
  band("workspace", "workspace (scratch shared by all ops)", arena_base + double(arena), double(workspace), "#fde7c8");

  // Every planned value: a box at its arena offset across its lifetime.
  for (size_t i = 0; i < values.size(); ++i) {
    const PlannedValue& v = values[i];
    const double x0 = x_of(v.first), x1 = x_of(v.last + 1);
    const double y1 = y_of(arena_base + double(v.offset)), y0 = y_of(arena_base + double(v.offset + v.bytes));
    s += "<rect class=\"value\" data-index=\"" + std::to_string(i) + "\" data-name=\"" + escaped(v.name) +
         "\" data-kind=\"" + v.kind + "\" x=\"" + num(x0) + "\" y=\"" + num(y0) + "\" width=\"" + num(x1 - x0) +
         "\" height=\"" + num(std::max(y1 - y0, 0.5)) + "\" fill=\"" + color(v.layer) + "\" fill-opacity=\"" +
         (v.kind == "gradient" ? "0.55" : "0.9") + "\" stroke=\"#333\" stroke-width=\"0.3\"><title>" + escaped(v.name) +
         " (" + v.kind + (v.layer.empty() ? std::string() : ", layer " + escaped(v.layer)) +
         "): " + escaped(format_bytes(v.bytes)) + " at offset " + std::to_string(v.offset) + ", steps " +
         std::to_string(v.first) + " to " + std::to_string(v.last) + "</title></rect>\n";
  }

  // The peak: the whole step's (a dashed line at the top) and the step where the arena holds the most.
  std::vector<size_t> live(static_cast<size_t>(last_step - first_step + 1), 0);
  for (const PlannedValue& v : values)
    for (int st = v.first; st <= v.last && st <= last_step; ++st) live[static_cast<size_t>(st - first_step)] += v.bytes;
  const size_t peak_at = static_cast<size_t>(std::max_element(live.begin(), live.end()) - live.begin());
  const int peak_step = static_cast<int>(peak_at) + first_step;
  s += "<line class=\"peak\" x1=\"" + num(kLeft) + "\" y1=\"" + num(y_of(total_bytes)) + "\" x2=\"" +
       num(kLeft + kPlotW) + "\" y2=\"" + num(y_of(total_bytes)) +
       "\" stroke=\"#c62828\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
  s += "<text x=\"" + num(kLeft + kPlotW - 4) + "\" y=\"" + num(y_of(total_bytes) - 4) +
       "\" text-anchor=\"end\" fill=\"#c62828\">peak " + escaped(format_bytes(total)) + "</text>\n";
  const double px = x_of(peak_step) + x_scale / 2;
  s += "<line class=\"peak-step\" x1=\"" + num(px) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(px) + "\" y2=\"" +
       num(kTop + kPlotH) + "\" stroke=\"#c62828\" stroke-width=\"1\" stroke-dasharray=\"2 3\"><title>step " +
       std::to_string(peak_step) + ": the arena holds the most live values, " + escaped(format_bytes(live[peak_at])) +
       "</title></line>\n";

  // Axes.
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop + kPlotH) + "\" x2=\"" + num(kLeft + kPlotW) + "\" y2=\"" +
       num(kTop + kPlotH) + "\" stroke=\"black\"/>\n";
  s += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(kLeft) + "\" y2=\"" + num(kTop + kPlotH) +
       "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double b = total_bytes * i / 4;
    s += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(y_of(b) + 4) + "\" text-anchor=\"end\">" +
         escaped(format_bytes(static_cast<size_t>(b))) + "</text>\n";
  }
  for (int i = 0; i <= 5; ++i) {
    const int step = first_step + (last_step - first_step) * i / 5;
    s += "<text x=\"" + num(x_of(step)) + "\" y=\"" + num(kTop + kPlotH + 16) + "\" text-anchor=\"middle\">" +
         std::to_string(step) + "</text>\n";
  }
  s += "<text x=\"" + num(kLeft + kPlotW / 2) + "\" y=\"" + num(kTop + kPlotH + 36) +
       "\" text-anchor=\"middle\">program step (forward, then backward and updates)</text>\n";

  // Legend: layers by color (with their activation bytes), then the bands.
  double ly = kTop + 10;
  const double lx = kLeft + kPlotW + 20;
  auto legend = [&](const std::string& fill, const std::string& text) {
    s += "<rect x=\"" + num(lx) + "\" y=\"" + num(ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" + fill +
         "\" stroke=\"#333\" stroke-width=\"0.5\"/>\n";
    s += "<text x=\"" + num(lx + 18) + "\" y=\"" + num(ly) + "\">" + escaped(text) + "</text>\n";
    ly += 18;
  };
  std::map<std::string, size_t> planned;  // per layer: the bytes of its values, activations and gradients
  for (const PlannedValue& v : values) planned[v.layer] += v.bytes;
  for (const LayerMemory& l : layers)
    legend(color(l.layer), l.layer + " (" + format_bytes(planned[l.layer]) + " planned)");
  legend("#9e9e9e", "loss and step values");
  legend("#d7e3f4", "weights " + format_bytes(weights));
  legend("#e8dcf2", "optimizer slots " + format_bytes(optimizer_state));
  legend("#f7f7f7", "arena " + format_bytes(arena));
  legend("#fde7c8", "workspace " + format_bytes(workspace));
  // Not a band: saves and loads happen between steps, never beside one (the text plan's "file staging" row).
  legend("#ffffff", "file staging " + format_bytes(file_staging) +
                        (file_staging == 0 ? " (saves and loads use each tensor's own memory)"
                                           : " (saves and loads, between steps: one staging buffer)"));
  s += "</svg>\n";
  return s;
}

}  // namespace tk
