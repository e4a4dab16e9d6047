#include "nn/training/staging.h"

#include <cstdio>
#include <vector>

#include "core/device_bytes.h"
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

// gather_rows into a program input anywhere: directly into host memory; for a device the host cannot address, into
// a host buffer (grown once per thread, so steps allocate nothing) copied to the device.
// Not yet (issue 13): pinned buffers and a copy stream, so the next batch moves while the step runs.
void gather_into(const graph::InputSlot& slot, const Tensor& src, const int64_t* idx, int64_t begin, int64_t n,
                 float scale = 1.0f, float offset = 0.0f) {
  if (slot.device.kind == DeviceKind::cpu) return gather_rows(src, idx, begin, n, slot.data, slot.dtype, scale, offset);
  thread_local std::vector<char> host;
  const int64_t row = src.shape().rank() > 0 && src.dim(0) > 0 ? src.numel() / src.dim(0) : 0;
  const size_t bytes = static_cast<size_t>(n * row) * dtype_size(slot.dtype);
  if (host.size() < bytes) host.resize(bytes);
  gather_rows(src, idx, begin, n, host.data(), slot.dtype, scale, offset);
  device_copy(slot.data, slot.device, host.data(), Device::cpu(), bytes);
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
    gather_into(slot, x[i], idx, begin, n, sc.scale, sc.offset);
  }
  if (y)
    for (size_t j = 0; j < c.y.size(); ++j) {
      const graph::InputSlot slot = access.slot(p, c.y[j]);
      gather_into(slot, (*y)[j], idx, begin, n);
    }
}

}  // namespace tk::nn
