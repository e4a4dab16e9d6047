// DeviceGather (device_gather.h): the plan of device_gather_plan.h as CUDA calls on the program's stream. Compiled in
// every build; the CUDA part only with TK_HAVE_CUDA.
#include "backends/cuda/device_gather.h"

#include "trainkit/core/error.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/device_gather_plan.h"
#include "backends/cuda/device_info.h"

namespace tk::cuda {

struct DeviceGather::Impl {
  static constexpr int kSlots = 2;
  Device device;
  int sms = 0;
  Tensor rows_on_device;  // (capacity,) int64 on `device`: the batch's row numbers, sized by the first batch
  // Pinned copies of the row numbers, one per slot (batches alternate), so that cudaMemcpyAsync is a true DMA and
  // the host never writes a slot whose upload is still queued: it waits for the slot's event first (the upload two
  // batches ago, long done in a loop that reads each step's logs).
  int64_t* pinned[kSlots] = {};
  cudaEvent_t uploaded[kSlots] = {};
  bool queued[kSlots] = {};
  int64_t capacity = 0;  // rows each pinned slot and rows_on_device hold
  int slot = 0;
  cudaStream_t stream = nullptr;  // the program's, for the batch under way
  const int64_t* idx = nullptr;   // the batch's rows (host), or null: [begin, begin + n)
  int64_t begin = 0, n = 0;
  bool uploaded_now = false;  // rows_on_device holds idx[0..n) (queued on `stream`)

  ~Impl() { release(); }
  void release() noexcept {
    cudaSetDevice(device.index);
    for (int s = 0; s < kSlots; ++s) {
      if (queued[s] && uploaded[s]) cudaEventSynchronize(uploaded[s]);  // no DMA may read a freed slot
      if (pinned[s]) cudaFreeHost(pinned[s]);
      if (uploaded[s]) cudaEventDestroy(uploaded[s]);
      pinned[s] = nullptr;
      uploaded[s] = nullptr;
      queued[s] = false;
    }
  }
  std::string where() const { return "gathering a batch of a Dataset::on_device source on " + device.to_string(); }
  void grow() {
    release();
    rows_on_device = Tensor();
    rows_on_device = Tensor(Shape({n}), DType::i64, device, "dataset/batch rows");
    for (int s = 0; s < kSlots; ++s) {
      check(cudaHostAlloc(reinterpret_cast<void**>(&pinned[s]), static_cast<size_t>(n) * sizeof(int64_t),
                          cudaHostAllocDefault),
            "cudaHostAlloc (batch row numbers)", where());
      check(cudaEventCreateWithFlags(&uploaded[s], cudaEventDisableTiming), "cudaEventCreateWithFlags", where());
    }
    capacity = n;
  }
  const int64_t* device_rows() {
    if (!uploaded_now) {
      if (capacity < n) grow();  // the first batch (a program's batch size is fixed): nothing is in flight to race
      if (queued[slot]) check(cudaEventSynchronize(uploaded[slot]), "cudaEventSynchronize (row numbers)", where());
      std::memcpy(pinned[slot], idx, static_cast<size_t>(n) * sizeof(int64_t));
      // Ordered on `stream` after the last batch's kernels that read rows_on_device, before this batch's.
      check(cudaMemcpyAsync(rows_on_device.raw(), pinned[slot], static_cast<size_t>(n) * sizeof(int64_t),
                            cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (batch row numbers)", where());
      check(cudaEventRecord(uploaded[slot], stream), "cudaEventRecord", where());
      queued[slot] = true;
      slot = (slot + 1) % kSlots;
      uploaded_now = true;
    }
    return static_cast<const int64_t*>(rows_on_device.raw());
  }
};

DeviceGather::DeviceGather(Device device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->sms = sm_count(device.index);
}
DeviceGather::~DeviceGather() = default;

void DeviceGather::begin_batch(const int64_t* idx, int64_t begin, int64_t n, void* stream) {
  Impl& m = *impl_;
  check(cudaSetDevice(m.device.index), "cudaSetDevice", m.where());
  m.stream = static_cast<cudaStream_t>(stream);
  m.idx = idx;
  m.begin = begin;
  m.n = n;
  m.uploaded_now = false;
}

void DeviceGather::rows(const Tensor& src, void* dst, DType dtype, float scale, float offset) {
  Impl& m = *impl_;
  if (src.device() != m.device)
    throw InvalidArgument("the dataset's array " + src.shape().to_string() + " is on " + src.device().to_string() +
                          " but the program runs on " + m.device.to_string() +
                          ": build the dataset with Dataset::on_device(arrays, " + m.device.to_string() + ")");
  if (m.n <= 0) return;
  const int64_t row = src.shape().rank() > 0 && src.dim(0) > 0 ? src.numel() / src.dim(0) : 0;
  const GatherPlan p = plan_device_gather(src.dtype(), dtype, scale, offset, m.idx, m.begin, m.n);
  if (p.kind == GatherPlan::Kind::copy) {
    const size_t row_bytes = static_cast<size_t>(row) * dtype_size(dtype);
    size_t at = 0;
    for (const IndexRun& r : p.runs) {
      const size_t bytes = static_cast<size_t>(r.count) * row_bytes;
      check(cudaMemcpyAsync(static_cast<char*>(dst) + at,
                            static_cast<const char*>(src.raw()) + static_cast<size_t>(r.first) * row_bytes, bytes,
                            cudaMemcpyDeviceToDevice, m.stream),
            "cudaMemcpyAsync (consecutive rows)", m.where());
      at += bytes;
    }
    return;
  }
  launch_gather_rows(src.raw(), static_cast<int>(src.dtype()), dst, static_cast<int>(dtype),
                     p.indexed ? m.device_rows() : nullptr, p.first, m.n, row, p.scaled, scale, offset, m.sms,
                     m.stream);
}

}  // namespace tk::cuda

#else

namespace tk::cuda {

struct DeviceGather::Impl {};
DeviceGather::DeviceGather(Device device) {
  throw Unsupported("DeviceGather on " + device.to_string() + ": this build has no CUDA backend");
}
DeviceGather::~DeviceGather() = default;
void DeviceGather::begin_batch(const int64_t*, int64_t, int64_t, void*) {}
void DeviceGather::rows(const Tensor&, void*, DType, float, float) {}

}  // namespace tk::cuda

#endif
