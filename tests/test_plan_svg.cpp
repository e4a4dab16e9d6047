// MemoryPlan::svg: the tutorial CNN's plan drawn, parsed back as XML (a small well-formedness checker here),
// an <svg> root in the SVG namespace, and one box per planned value at its offset over its lifetime.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "trainkit/trainkit.h"

namespace tk {
namespace {

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside (entities decoded)
};

std::string decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) throw FormatError("unterminated entity in '" + s.substr(i, 20) + "'");
    const std::string e = s.substr(i + 1, semi - i - 1);
    static const std::map<std::string, char> named{
        {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    if (!named.count(e)) throw FormatError("unknown entity &" + e + ";");
    out += named.at(e);
    i = semi;
  }
  return out;
}

// Parses `xml` into its elements in document order; throws FormatError unless it is well formed (one root,
// tags nested and closed, attributes quoted and unique, no '<' or bare '&' in text or attribute values).
std::vector<Element> parse_xml(const std::string& xml) {
  std::vector<Element> all;
  std::vector<size_t> open;
  size_t i = 0, roots = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  while (i < xml.size()) {
    if (xml[i] != '<') {
      const size_t next = xml.find('<', i);
      const std::string text = xml.substr(i, next - i);
      if (open.empty() && text.find_first_not_of(" \n\t\r") != std::string::npos)
        throw FormatError("text outside the root element");
      if (!open.empty()) all[open.back()].text += decode(text);
      if (next == std::string::npos) break;
      i = next;
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      i = xml.find("-->", i) + 3;
      continue;
    }
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) throw FormatError("unterminated tag at byte " + std::to_string(i));
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) throw FormatError("empty tag");
    if (tag[0] == '/') {
      if (open.empty() || all[open.back()].name != tag.substr(1))
        throw FormatError("</" + tag.substr(1) + "> closes " + (open.empty() ? "nothing" : all[open.back()].name));
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    Element el;
    size_t p = tag.find_first_of(" \n\t");
    el.name = tag.substr(0, p);
    while (p != std::string::npos && p < tag.size()) {
      p = tag.find_first_not_of(" \n\t", p);
      if (p == std::string::npos) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        throw FormatError("unquoted attribute in <" + el.name + ">");
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) throw FormatError("unterminated attribute in <" + el.name + ">");
      const std::string key = tag.substr(p, eq - p), raw = tag.substr(eq + 2, close - eq - 2);
      if (raw.find('<') != std::string::npos) throw FormatError("'<' in attribute " + key);
      if (!el.attrs.emplace(key, decode(raw)).second) throw FormatError("attribute " + key + " twice");
      p = close + 1;
    }
    if (open.empty() && ++roots > 1) throw FormatError("a second root element <" + el.name + ">");
    all.push_back(el);
    if (!self_closing) open.push_back(all.size() - 1);
  }
  if (!open.empty()) throw FormatError("<" + all[open.back()].name + "> is not closed");
  if (all.empty()) throw FormatError("no element");
  return all;
}

TEST(PlanSvg, XmlCheckerRejectsWhatIsNotWellFormed) {
  EXPECT_NO_THROW(parse_xml("<svg a=\"1\"><rect/><g><text>a &amp; b</text></g></svg>"));
  EXPECT_THROW(parse_xml("<svg><rect></svg>"), FormatError);
  EXPECT_THROW(parse_xml("<svg a=1></svg>"), FormatError);
  EXPECT_THROW(parse_xml("<svg><text>a & b</text></svg>"), FormatError);
  EXPECT_THROW(parse_xml("<svg></svg><svg></svg>"), FormatError);
  EXPECT_THROW(parse_xml("<svg a=\"1\" a=\"2\"></svg>"), FormatError);
}

TEST(PlanSvg, TheCnnPlanHasABoxForEveryPlannedValue) {
  clear_session();
  std::unique_ptr<Sequential> model = models::tutorial_cnn(Shape{28, 28}, 10, 1.0f / 255);
  model->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  const MemoryPlan plan = model->memory_plan(16);
  ASSERT_GT(plan.values.size(), 20u);
  const std::vector<Element> svg = parse_xml(plan.svg());
  ASSERT_EQ(svg[0].name, "svg");
  EXPECT_EQ(svg[0].attrs.at("xmlns"), "http://www.w3.org/2000/svg");

  const double height = std::stod(svg[0].attrs.at("height"));
  std::map<std::string, const Element*> boxes, bands;
  for (const Element& e : svg) {
    if (e.name != "rect" || !e.attrs.count("class")) continue;
    if (e.attrs.at("class") == "value") {
      EXPECT_TRUE(boxes.emplace(e.attrs.at("data-index"), &e).second) << "two boxes for " << e.attrs.at("data-index");
    } else if (e.attrs.at("class") == "band") {
      bands.emplace(e.attrs.at("data-band"), &e);
    }
  }
  EXPECT_EQ(boxes.size(), plan.values.size());
  for (const char* b : {"weights", "optimizer_state", "arena", "workspace"}) EXPECT_TRUE(bands.count(b)) << b;
  // The text plan's "file staging" row, in the legend (0 on the cpu: saves and loads use each tensor's own memory).
  const std::string staging = "file staging " + config::format_bytes(plan.file_staging);
  EXPECT_TRUE(std::any_of(svg.begin(), svg.end(), [&](const Element& e) {
    return e.name == "text" && e.text.rfind(staging, 0) == 0;
  })) << staging;
  // Each box inside the arena band, its height proportional to its bytes, later lifetimes further right.
  const Element& arena = *bands.at("arena");
  const double arena_top = std::stod(arena.attrs.at("y")), arena_h = std::stod(arena.attrs.at("height"));
  const double bytes_per_px = double(plan.arena) / arena_h;
  size_t layers_seen = 0;
  std::map<std::string, int> kinds;
  for (size_t i = 0; i < plan.values.size(); ++i) {
    const PlannedValue& v = plan.values[i];
    ASSERT_TRUE(boxes.count(std::to_string(i))) << v.name;
    const Element& box = *boxes.at(std::to_string(i));
    EXPECT_EQ(box.attrs.at("data-name"), v.name);
    const double y = std::stod(box.attrs.at("y")), h = std::stod(box.attrs.at("height"));
    EXPECT_GE(y, arena_top - 0.02) << v.name;
    EXPECT_LE(y + h, arena_top + arena_h + 0.6) << v.name;
    EXPECT_LE(y + h, height);
    if (v.bytes > 64 * 1024) EXPECT_NEAR(h * bytes_per_px / double(v.bytes), 1.0, 0.05) << v.name;
    EXPECT_GT(std::stod(box.attrs.at("width")), 0.0) << v.name;
    EXPECT_EQ(box.attrs.at("data-kind"), v.kind);
    ++kinds[v.kind];
    layers_seen += !v.layer.empty();
  }
  EXPECT_GT(kinds["activation"], 0);
  EXPECT_GT(kinds["gradient"], 0);
  EXPECT_GT(kinds["input"], 0);
  // Every value but the loss's and the step's own (inputs, targets, loss, metrics) is some layer's.
  EXPECT_GE(layers_seen, plan.values.size() - 6);
  // The peak is marked: a line at the top labelled with the total.
  bool peak = false;
  for (const Element& e : svg) peak |= e.name == "line" && e.attrs.count("class") && e.attrs.at("class") == "peak";
  EXPECT_TRUE(peak);
}

}  // namespace
}  // namespace tk
