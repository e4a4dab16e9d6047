#include "nn/training/staging.h"

#include <cstdio>

#include "nn/training/batching.h"

namespace tk::nn {
namespace {

// Once per model and input: the dtype conversion staging does for it (so a float16 file is not silently
// trained as something else).
void log_conversion(Compiled& c, const graph::Graph& g, size_t input, const Tensor& src) {
  if (c.x_conversion_seen[input]) return;  // once per program and input: nothing is built per batch
  c.x_conversion_seen[input] = 1;
  const graph::Node& n = g[c.x[input]];
  const StageScale& sc = c.x_scale[input];
  const bool scaled = sc.scale != 1.0f || sc.offset != 0.0f;
  if (src.dtype() == n.dtype && !scaled) return;
  const std::string key = n.name + "/" + std::string(dtype_name(src.dtype()));
  if (!c.conversions_logged || !c.conversions_logged->insert(key).second) return;
  char how[96] = "";
  if (scaled) std::snprintf(how, sizeof how, " with x * %.9g + %.9g (Rescaling)", double(sc.scale), double(sc.offset));
  std::fprintf(stdout, "trainkit: input '%s' holds %s; each batch is converted to %s%s as it is staged\n",
               n.name.c_str(), std::string(dtype_name(src.dtype())).c_str(), std::string(dtype_name(n.dtype)).c_str(),
               how);
}

}  // namespace

void BatchStager::copy_rows(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                            int64_t begin, int64_t n) {
  graph::Program& p = *c.program;
  const graph::InputAccess access;
  for (size_t i = 0; i < c.x.size(); ++i) {
    if (p.plan().offset[static_cast<size_t>(c.x[i])] < 0) continue;  // an input no output needs
    const graph::InputSlot slot = access.slot(p, c.x[i]);
    const StageScale& sc = c.x_scale[i];
    log_conversion(c, p.graph(), i, x[i]);
    gather_rows(x[i], idx, begin, n, slot.data, slot.dtype, sc.scale, sc.offset);
  }
  if (y)
    for (size_t j = 0; j < c.y.size(); ++j) {
      const graph::InputSlot slot = access.slot(p, c.y[j]);
      gather_rows((*y)[j], idx, begin, n, slot.data, slot.dtype);
    }
}

}  // namespace tk::nn
