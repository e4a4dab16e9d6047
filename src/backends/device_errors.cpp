#include "backends/device_errors.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "graph/graph.h"
#include "trainkit/core/error.h"

namespace tk::backends {
namespace {

struct Site {
  std::string op, node;
  Shape indices;                 // a gather's indices, or an integer Binary's second operand
  bool integer_operand = false;  // which message: gather_index_message or integer_operand_message
  graph::BinaryFn fn{};          // the integer Binary's function
  bool operator==(const Site&) const = default;
};
std::mutex& sites_lock() {
  static std::mutex m;
  return m;
}
std::vector<Site>& sites() {
  static std::vector<Site> s;
  return s;
}

}  // namespace

std::string gather_index_message(std::string_view op, const std::string& node, int64_t index, int64_t position,
                                 const Shape& indices, int64_t rows) {
  // The position as coordinates too: for an Embedding's (batch, steps) ids, the first is the row of the batch.
  std::string at;
  int64_t rest = position;
  for (int d = indices.rank() - 1; d >= 0; --d) {
    const int64_t n = std::max<int64_t>(indices[d], 1);
    at = std::to_string(rest % n) + (at.empty() ? "" : ", ") + at;
    rest /= n;
  }
  const std::string where =
      indices.rank() >= 1 ? ": it is indices[" + at + "], row " + at.substr(0, at.find(',')) + " of the batch" : "";
  return std::string(op) + " '" + node + "': index " + std::to_string(index) + " at position " +
         std::to_string(position) + " of the indices " + indices.to_string() + " is outside the table of " +
         std::to_string(rows) + " rows (valid: 0 to " + std::to_string(rows - 1) +
         "; an Embedding's input_dim, the vocabulary size, must exceed every token id)" + where;
}

namespace {
int32_t site_of(const Site& want) {
  std::lock_guard<std::mutex> hold(sites_lock());
  std::vector<Site>& s = sites();
  const auto found = std::find(s.begin(), s.end(), want);  // without allocating: a step's launches reuse their sites
  if (found != s.end()) return static_cast<int32_t>(found - s.begin());
  s.push_back(want);
  return static_cast<int32_t>(s.size() - 1);
}

std::string binary_fn_name(graph::BinaryFn f) {
  switch (f) {
#define TK_NAME(n)         \
  case graph::BinaryFn::n: \
    return #n;
    TK_ARITHMETIC_FNS(TK_NAME)
    TK_COMPARISON_FNS(TK_NAME)
#undef TK_NAME
    default:
      return "?";
  }
}

std::string integer_message(std::string_view op, const std::string& node, graph::BinaryFn f, int64_t value,
                            int64_t position, const Shape& operand) {
  const bool power = f == graph::BinaryFn::power;
  return std::string(op) + " " + binary_fn_name(f) + " '" + node + "': " +
         (power ? "integers to negative integer powers are not allowed: the exponent "
                : "integer division by zero: the divisor ") +
         std::to_string(value) + " at position " + std::to_string(position) + " of the second operand " +
         operand.to_string() +
         (power ? " (Cast both operands to a float dtype for a fractional result)"
                : " (mask the zeros first, e.g. where(b == 0, 1, b), or Cast to a float dtype, where x // 0 is inf)");
}
}  // namespace

int32_t gather_site(const graph::Node& node, const Shape& indices) {
  return site_of({std::string(graph::op_name(node.op)), node.name, indices, false, {}});
}

std::string integer_operand_message(const graph::Node& node, int64_t value, int64_t position, const Shape& operand) {
  return integer_message(graph::op_name(node.op), node.name, node.attrs.binary, value, position, operand);
}

int32_t integer_operand_site(const graph::Node& node, const Shape& operand) {
  return site_of({std::string(graph::op_name(node.op)), node.name, operand, true, node.attrs.binary});
}

void raise_recorded_error(DeviceErrorRecord& r) {
  if (!r.raised) return;
  const DeviceErrorRecord seen = r;
  r = DeviceErrorRecord{};  // reported once: the next step starts clean
  Site site;
  {
    std::lock_guard<std::mutex> hold(sites_lock());
    if (seen.site < 0 || static_cast<size_t>(seen.site) >= sites().size())
      throw Error("a device kernel recorded an error for unknown site " + std::to_string(seen.site) + " (index " +
                  std::to_string(seen.value) + " at position " + std::to_string(seen.position) + ")");
    site = sites()[static_cast<size_t>(seen.site)];
  }
  if (site.integer_operand)
    throw InvalidArgument(integer_message(site.op, site.node, site.fn, seen.value, seen.position, site.indices));
  throw InvalidArgument(gather_index_message(site.op, site.node, seen.value, seen.position, site.indices, seen.limit));
}

}  // namespace tk::backends
