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
  Shape indices;
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

int32_t gather_site(const graph::Node& node, const Shape& indices) {
  const std::string_view op = graph::op_name(node.op);
  std::lock_guard<std::mutex> hold(sites_lock());
  std::vector<Site>& s = sites();
  for (size_t i = 0; i < s.size(); ++i)  // found without allocating: a step's launches reuse their sites
    if (s[i].op == op && s[i].node == node.name && s[i].indices == indices) return static_cast<int32_t>(i);
  s.push_back({std::string(op), node.name, indices});
  return static_cast<int32_t>(s.size() - 1);
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
  throw InvalidArgument(gather_index_message(site.op, site.node, seen.value, seen.position, site.indices, seen.limit));
}

}  // namespace tk::backends
