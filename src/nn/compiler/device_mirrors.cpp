#include "nn/compiler/device_mirrors.h"

#include "core/device_bytes.h"

namespace tk::nn {

DeviceMirrors::DeviceMirrors(const Model& model, Device device, int replica, bool active,
                             std::function<void()> synchronize)
    : model_(model), device_(device), replica_(replica), active_(active), synchronize_(std::move(synchronize)) {}

Tensor* DeviceMirrors::storage(const Weight& w, bool allocate) {
  if (!active_) return const_cast<Tensor*>(&w.value);
  auto found = copies_.find(w.id);
  if (found == copies_.end()) {
    if (!allocate) return nullptr;
    Tensor copy(w.value.shape(), w.value.dtype(), device_,
                replica_ > 0 ? w.name + " (replica " + std::to_string(replica_) + ")" : w.name);
    device_copy(copy.raw(), copy.device(), w.value.raw(), w.value.device(), w.value.nbytes());
    found = copies_.emplace(w.id, std::move(copy)).first;
  }
  return &found->second;
}

const Tensor& DeviceMirrors::current_value(const Weight& w) const {
  auto found = copies_.find(w.id);
  return found != copies_.end() ? found->second : w.value;
}

void DeviceMirrors::copy(bool to_copies, bool allocate) {
  synchronize_();  // cudaMemcpy on the legacy stream does not wait for the non-blocking compute stream
  for (const LayerPtr& l : model_.layers())
    for (const Weight& w : l->weights()) {
      Tensor* mine = storage(w, allocate);  // in place: programs hold the storage
      if (!mine) continue;
      Tensor& weight = const_cast<Tensor&>(w.value);
      if (to_copies)
        device_copy(mine->raw(), mine->device(), weight.raw(), weight.device(), weight.nbytes());
      else
        device_copy(weight.raw(), weight.device(), mine->raw(), mine->device(), weight.nbytes());
    }
}

void DeviceMirrors::upload(bool force) {
  if (replica_ > 0 || !active_ || (ahead_ && !force)) return;
  ahead_ = false;
  copy(/*to_copies=*/true, /*allocate=*/false);
}

void DeviceMirrors::download() {
  if (replica_ > 0 || !active_ || !ahead_) return;
  copy(/*to_copies=*/false, /*allocate=*/false);
  ahead_ = false;
}

void DeviceMirrors::copy_from(const DeviceMirrors& primary) {
  // From the primary's storage: on a GPU its device copies, which are ahead of the model's weights while it trains
  // (a step that some replicas sat out, say); on the cpu the model's weights themselves. GPU to GPU goes through
  // cudaMemcpy (peer to peer where the GPUs allow it), after both replicas' compute streams.
  synchronize_();
  primary.synchronize_();
  for (const LayerPtr& l : model_.layers())
    for (const Weight& w : l->weights()) {
      Tensor* mine = storage(w, /*allocate=*/true);
      const Tensor& theirs = primary.current_value(w);
      device_copy(mine->raw(), mine->device(), theirs.raw(), theirs.device(), theirs.nbytes());
    }
}

size_t DeviceMirrors::bytes() const {
  size_t bytes = 0;
  for (const auto& [id, t] : copies_) bytes += allocated_bytes(t.nbytes());
  return bytes;
}

}  // namespace tk::nn
