// LaggedLogs (lagged_logs.h): the slots of steps whose logs are not read yet, and the two stores (host; a backend's
// read-back slots, graph/backend_objects.h).
#include "nn/training/lagged_logs.h"

#include <cstdlib>
#include <cstring>

#include "core/float_bytes.h"
#include "graph/backend.h"
#include "nn/compiler/programs.h"
#include "nn/training/fit_common.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

namespace tk::nn {
namespace {

constexpr size_t kValueBytes = 4;  // each log value's room in a slot (logs are float32; 16-bit ones fit too)

// The CPU (and tests): values read at once into a growing host buffer.
class HostStore final : public LogStore {
 public:
  size_t capacity(int slot) const override { return buf(slot).size(); }
  void grow(int slot, size_t bytes, size_t) override {
    if (buf(slot).size() < bytes) buf(slot).resize(bytes);  // keeps the bytes already there
  }
  const void* data(int slot) const override { return buf(slot).data(); }
  void queue(int slot, Compiled& c, int value, size_t offset, size_t bytes) override {
    c.program->read_output(value, buf(slot).data() + offset, bytes);
  }
  void seal(int, void*) override {}
  void wait(int) override {}

 private:
  std::vector<unsigned char>& buf(int slot) const {
    if (bufs_.size() <= static_cast<size_t>(slot)) bufs_.resize(static_cast<size_t>(slot) + 1);
    return bufs_[static_cast<size_t>(slot)];
  }
  mutable std::vector<std::vector<unsigned char>> bufs_;
};

// A device with read-back slots (CUDA: pinned memory and events): copies on the program's stream into the slots, an
// event per step.
class DeviceStore final : public LogStore {
 public:
  explicit DeviceStore(std::unique_ptr<graph::ReadbackSlots> slots) : slots_(std::move(slots)) {}
  size_t capacity(int slot) const override { return slots_->capacity(slot); }
  void grow(int slot, size_t bytes, size_t keep) override { slots_->grow(slot, bytes, keep); }
  const void* data(int slot) const override { return slots_->data(slot); }
  void queue(int slot, Compiled& c, int value, size_t offset, size_t bytes) override {
    c.program->copy_output_async(value, static_cast<char*>(slots_->data(slot)) + offset, bytes);
  }
  void seal(int slot, void* stream) override { slots_->record(slot, stream); }
  void wait(int slot) override { slots_->wait(slot); }

 private:
  std::unique_ptr<graph::ReadbackSlots> slots_;
};

}  // namespace

int log_lag(Device device, bool loss_scaling, bool replicated) {
  // Read when fit starts (lagged_logs.h); 0: fit reads each step's logs right after it, 1: one step late.
  const std::optional<std::string> env = runtime::setting_choice(runtime::Setting::log_lag);
  // Whatever TK_LOG_LAG says: the next step's host-side scalars depend on this step's outcome (loss scaling), or the
  // replicas' logs are merged on their own threads (data parallel).
  if (loss_scaling || replicated) return 0;
  if (env) return *env == "1" ? 1 : 0;
  return device.kind == DeviceKind::cpu ? 0 : 1;
}

std::unique_ptr<LogStore> LaggedLogs::host_store() { return std::make_unique<HostStore>(); }
std::unique_ptr<LogStore> LaggedLogs::store_for(Device device, int slots) {
  if (device.kind == DeviceKind::cpu) return host_store();
  std::unique_ptr<graph::ReadbackSlots> s = graph::backend(device.kind).make_readback_slots(device, slots);
  if (!s) return host_store();
  return std::make_unique<DeviceStore>(std::move(s));
}

LaggedLogs::LaggedLogs(int lag, std::unique_ptr<LogStore> store)
    : lag_(lag), store_(std::move(store)), steps_(static_cast<size_t>(lag + 1)) {
  if (lag < 0) throw InvalidArgument("LaggedLogs: the lag must be >= 0, got " + std::to_string(lag));
}

void LaggedLogs::begin(int64_t batch) {
  if (open_ >= 0) throw InvalidArgument("LaggedLogs: begin() of batch " + std::to_string(batch) + " before end()");
  // lag + 1 slots: the oldest pending one was delivered by the loop (ready() was false) before this begin.
  if (static_cast<int>(pending_.size()) > lag_)
    throw InvalidArgument("LaggedLogs: " + std::to_string(pending_.size()) + " batches pending at lag " +
                          std::to_string(lag_) + " (deliver before queuing another step)");
  Step& s = steps_[static_cast<size_t>(next_slot_)];
  s.batch = batch;
  s.slot = next_slot_;
  s.bytes = 0;
  s.used = 0;
  open_ = next_slot_;
  open_stream_ = nullptr;
  open_added_ = false;
  next_slot_ = (next_slot_ + 1) % (lag_ + 1);
}

void LaggedLogs::add(Compiled& c, int64_t rows) {
  if (open_ < 0) throw InvalidArgument("LaggedLogs: add() outside begin()..end()");
  Step& s = steps_[static_cast<size_t>(open_)];
  size_t values = 0;  // a stateful metric's log holds its counts (stats.width values)
  for (size_t k = 0; k < c.logs.size(); ++k) values += k < c.log_stats.size() ? size_t(c.log_stats[k].width) : 1;
  const size_t need = s.bytes + values * kValueBytes;
  if (need > store_->capacity(open_)) {
    c.program->synchronize();  // the copies already queued into the slot land before it is replaced
    store_->grow(open_, 2 * need, s.bytes);
  }
  if (s.entries.size() <= s.used) s.entries.emplace_back();  // entries are reused across steps (their vectors too)
  Entry* e = &s.entries[s.used++];
  e->names.resize(c.logs.size());
  e->dtypes.resize(c.logs.size());
  e->stats = c.log_stats;
  e->stats.resize(c.logs.size());
  e->offset = s.bytes;
  e->rows = rows;
  open_stream_ = c.program->stream();
  open_added_ = true;
  for (size_t k = 0; k < c.logs.size(); ++k) {
    const auto& [name, id] = c.logs[k];
    if (e->names[k] != name) e->names[k] = name;
    const DType t = c.program->graph()[id].dtype;
    e->dtypes[k] = static_cast<uint8_t>(t);
    const size_t width = static_cast<size_t>(e->stats[k].width);
    store_->queue(open_, c, id, s.bytes, width * dtype_size(t));
    s.bytes += width * kValueBytes;
  }
}

void LaggedLogs::end() {
  if (open_ < 0) throw InvalidArgument("LaggedLogs: end() without begin()");
  if (open_added_) store_->seal(open_, open_stream_);
  pending_.push_back(open_);
  open_ = -1;
}

int64_t LaggedLogs::deliver(Accumulator& acc) {
  if (pending_.empty()) throw InvalidArgument("LaggedLogs: deliver() with no pending batch");
  const int slot = pending_.front();
  pending_.erase(pending_.begin());
  delivering_ = true;  // until delivered(): a throw from here on leaves it set
  store_->wait(slot);
  const Step& s = steps_[static_cast<size_t>(slot)];
  const auto* bytes = static_cast<const unsigned char*>(store_->data(slot));
  thread_local std::vector<float> values;
  for (size_t i = 0; i < s.used; ++i) {
    const Entry& e = s.entries[i];
    size_t at = 0;  // flat over the logs' widths, as Accumulator::add_values reads them
    for (size_t k = 0; k < e.names.size(); ++k) {
      const auto t = static_cast<DType>(e.dtypes[k]);
      const size_t width = static_cast<size_t>(e.stats[k].width);
      if (values.size() < at + width) values.resize(at + width);
      for (size_t v = 0; v < width; ++v)
        values[at + v] = float_from_bytes(bytes + e.offset + (at + v) * kValueBytes, t);
      at += width;
    }
    acc.add_values(e.names, e.stats, values.data(), e.rows);
  }
  return s.batch;
}

void LaggedLogs::abandon_open() noexcept {
  if (open_ < 0) return;
  if (open_added_) try {
      store_->seal(open_, open_stream_);
    } catch (const std::exception&) {  // the device failed: its copies failed with it
    }
  open_ = -1;
}

void LaggedLogs::discard() noexcept {
  abandon_open();
  pending_.clear();
}

}  // namespace tk::nn
