#include "cli/model_spec.h"

#include <charconv>

#include "trainkit/core/error.h"

namespace tk::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

template <typename T>
bool parse_number(const std::string& s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::vector<LayerPtr> parse_model_spec(const std::string& spec) {
  std::vector<LayerPtr> layers;
  const std::vector<std::string> items = split(spec, ',');
  for (size_t i = 0; i < items.size(); ++i) {
    const std::vector<std::string> f = split(items[i], ':');
    auto fail = [&](const std::string& why) -> InvalidArgument {
      return InvalidArgument("--model item " + std::to_string(i + 1) + " ('" + items[i] + "'): " + why +
                             " (expected dense:UNITS[:ACTIVATION], dropout:RATE, activation:NAME or flatten, "
                             "separated by commas)");
    };
    try {
      if (f[0] == "dense") {
        int64_t units = 0;
        if (f.size() < 2 || f.size() > 3 || !parse_number(f[1], units) || units <= 0)
          throw fail("dense needs a positive unit count");
        layers.push_back(layers::Dense(units, f.size() == 3 ? f[2] : "linear"));
      } else if (f[0] == "dropout") {
        float rate = 0;
        if (f.size() != 2 || !parse_number(f[1], rate)) throw fail("dropout needs a rate");
        layers.push_back(layers::Dropout(rate));
      } else if (f[0] == "activation") {
        if (f.size() != 2) throw fail("activation needs a name");
        layers.push_back(layers::Activation(f[1]));
      } else if (f[0] == "flatten") {
        if (f.size() != 1) throw fail("flatten takes no arguments");
        layers.push_back(layers::Flatten());
      } else {
        throw fail("unknown layer '" + f[0] + "'");
      }
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      if (what.rfind("--model", 0) == 0) throw;
      throw fail(what);
    }
  }
  if (layers.empty()) throw InvalidArgument("--model is empty");
  return layers;
}

}  // namespace tk::cli
