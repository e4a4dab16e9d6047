#include "nn/training/staging.h"

#include <cstdio>
#include <vector>

#include "core/device_bytes.h"
#include "nn/training/batching.h"
#include "runtime/log.h"

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
  if (!runtime::log_enabled(runtime::LogSeverity::info)) return;
  char how[96] = "";
  if (scaled) std::snprintf(how, sizeof how, " with x * %.9g + %.9g (Rescaling)", double(sc.scale), double(sc.offset));
  std::fprintf(stdout, "trainkit: input '%s' holds %s; each batch is converted to %s%s as it is staged\n",
               n.name.c_str(), std::string(dtype_name(src.dtype())).c_str(), std::string(dtype_name(n.dtype)).c_str(),
               how);
}

// Bytes of n rows of `src` in `dtype` (gather_rows writes n * row elements).
size_t rows_bytes(const Tensor& src, int64_t n, DType dtype) {
  const int64_t row = src.shape().rank() > 0 && src.dim(0) > 0 ? src.numel() / src.dim(0) : 0;
  return static_cast<size_t>(n * row) * dtype_size(dtype);
}

// gather_rows into a program input anywhere: directly into host memory; for a device the host cannot address, into
// a host buffer (grown once per thread, so steps allocate nothing) copied to the device. Programs whose backend has
// input staging of its own (CUDA) take stage_async below instead; this path is for any other device the host cannot
// address.
void gather_into(const graph::InputSlot& slot, const Tensor& src, const int64_t* idx, int64_t begin, int64_t n,
                 float scale = 1.0f, float offset = 0.0f) {
  if (slot.device.kind == DeviceKind::cpu) return gather_rows(src, idx, begin, n, slot.data, slot.dtype, scale, offset);
  thread_local std::vector<char> host;
  const size_t bytes = rows_bytes(src, n, slot.dtype);
  if (host.size() < bytes) host.resize(bytes);
  gather_rows(src, idx, begin, n, host.data(), slot.dtype, scale, offset);
  device_copy(slot.data, slot.device, host.data(), Device::cpu(), bytes);
}

// The program's input regions, in the order stage_async copies them: c.x, then c.y; 0 bytes for an input no
// output needs (no storage).
std::vector<size_t> input_bytes(const Compiled& c) {
  const graph::Program& p = *c.program;
  std::vector<size_t> bytes;
  for (int id : c.x) {
    const graph::Node& n = p.graph()[id];
    const bool stored = p.plan().offset[static_cast<size_t>(id)] >= 0;
    bytes.push_back(stored ? static_cast<size_t>(n.shape.numel()) * dtype_size(n.dtype) : 0);
  }
  for (int id : c.y) {
    const graph::Node& n = p.graph()[id];
    bytes.push_back(static_cast<size_t>(n.shape.numel()) * dtype_size(n.dtype));
  }
  return bytes;
}

}  // namespace

// A program with its backend's input staging (c.staging, made at its first bind; CUDA: pinned buffers and a copy
// stream): the batch is gathered (converted, scaled) into the staging's next host buffer, then copied
// asynchronously; the ordering against the program's stream (its ProgramCache's) is the backend's.
void BatchStager::stage_async(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y,
                              const int64_t* idx, int64_t begin, int64_t n) {
  graph::Program& p = *c.program;
  graph::InputStaging& s = *c.staging;
  // Copies are only queued here (submit() issues them), so each is recorded before its gather: copy() refuses more
  // bytes than the region holds before gather_rows could write past it.
  auto* host = static_cast<char*>(s.acquire());
  struct Abandon {  // a gather that throws (bad data) leaves the buffer free for the next batch
    graph::InputStaging* s;
    ~Abandon() {
      if (s) s->abandon();
    }
  } abandon{&s};
  for_each_input(c, x, y, [&](const graph::InputSlot& slot, const Tensor& src, size_t i, const StageScale& sc) {
    if (i < c.x.size()) log_conversion(c, p.graph(), i, src);
    s.copy(i, slot.data, rows_bytes(src, n, slot.dtype));  // first: it refuses more bytes than the region holds
    gather_rows(src, idx, begin, n, host + s.offset(i), slot.dtype, sc.scale, sc.offset);
  });
  abandon.s = nullptr;
  s.submit();
}

void BatchStager::bind_rows(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                            int64_t begin, int64_t n) {
  graph::Program& p = *c.program;
  if (!x.empty() && !x[0].on_host()) return stage_on_device(c, x, y, idx, begin, n);
  if (p.device().kind != DeviceKind::cpu) {
    // Once per program (kind and batch size), never per step: its backend's staging, or none (then gather_into).
    if (!c.staging_asked) {
      c.staging = graph::backend(p.device().kind).make_input_staging(p.device(), input_bytes(c), p.stream());
      c.staging_asked = true;  // after it was made: a throw (no pinned memory) is thrown again at the next bind
    }
    if (c.staging) return stage_async(c, x, y, idx, begin, n);
  }
  for_each_input(c, x, y, [&](const graph::InputSlot& slot, const Tensor& src, size_t i, const StageScale& sc) {
    if (i < c.x.size()) log_conversion(c, p.graph(), i, src);
    gather_into(slot, src, idx, begin, n, sc.scale, sc.offset);
  });
}

}  // namespace tk::nn
