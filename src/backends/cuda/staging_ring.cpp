// StagingRing (staging_ring.h): the pinned buffers' layout and the order of the waits around each batch's copies.
#include "backends/cuda/staging_ring.h"

#include <string>

#include "trainkit/core/error.h"

namespace tk::cuda {

StagingLayout staging_layout(const std::vector<size_t>& region_bytes) {
  StagingLayout l;
  l.bytes = region_bytes;
  l.offset.reserve(region_bytes.size());
  size_t at = 0;
  for (size_t bytes : region_bytes) {
    l.offset.push_back(at);
    at += (bytes + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
  }
  l.total = at > 0 ? at : kStagingAlignment;
  return l;
}

StagingRing::StagingRing(const std::vector<size_t>& region_bytes, StagingEvents& events)
    : layout_(staging_layout(region_bytes)), events_(events) {
  pending_.reserve(region_bytes.size());  // a step allocates nothing
}

size_t StagingRing::offset(size_t region) const {
  if (region >= layout_.offset.size())
    throw InvalidArgument("staging region " + std::to_string(region) + " of " + std::to_string(layout_.offset.size()));
  return layout_.offset[region];
}

int StagingRing::acquire() {
  if (current_ >= 0) throw InvalidArgument("staging: acquire() twice without submit()");
  const int b = next_;
  // Hazard 1: the host is about to overwrite buffer b; its last copy (two batches ago) must have read it.
  if (queued_[b]) {
    events_.host_wait_copied(b);
    queued_[b] = false;
  }
  next_ = (b + 1) % kBuffers;
  current_ = b;
  pending_.clear();
  return b;
}

void StagingRing::copy(size_t region, void* device_dst, size_t bytes) {
  if (current_ < 0) throw InvalidArgument("staging: copy() outside acquire()..submit()");
  if (bytes > layout_.bytes.at(region))
    throw InvalidArgument("staging: " + std::to_string(bytes) + " bytes into input region " + std::to_string(region) +
                          " of " + std::to_string(layout_.bytes[region]) + " bytes");
  if (bytes > 0) pending_.push_back(Pending{offset(region), device_dst, bytes});
}

void StagingRing::submit() {
  if (current_ < 0) throw InvalidArgument("staging: submit() without acquire()");
  const int b = current_;
  current_ = -1;
  if (pending_.empty()) return;  // nothing to copy: no waits either
  events_.copy_after_compute();  // hazard 2: the last step (and any other work) is done with the input regions
  for (const Pending& p : pending_) events_.copy(b, p.offset, p.dst, p.bytes);
  events_.record_copied(b);
  queued_[b] = true;
  events_.compute_after_copied(b);  // hazard 3: the next step reads the inputs only after they landed
  pending_.clear();
}

void StagingRing::abandon() {
  if (current_ < 0) return;
  next_ = current_;  // its turn again; its last copy was waited for in acquire()
  current_ = -1;
  pending_.clear();
}

void StagingRing::drain() {
  for (int b = 0; b < kBuffers; ++b)
    if (queued_[b]) {
      events_.host_wait_copied(b);
      queued_[b] = false;
    }
}

}  // namespace tk::cuda
