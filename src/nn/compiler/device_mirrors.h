// The copies of a model's weights that one replica's programs train: on a replica r > 0 (its own device), and on a
// device the host cannot address (a GPU), where the model's weights stay in host memory and the device copies run
// ahead of them while a fit goes on. On the cpu's replica 0 there are none: its programs train the model's weights.
//
//   DeviceMirrors& m = programs.mirrors();
//   m.upload();    // the model's weights -> the copies (unless the copies were trained since: they are newer)
//   ... steps ...  // m.mark_trained() after each
//   m.download();  // the copies -> the model's weights (get_weights, save, each epoch's end)
#pragma once
#include <cstdint>
#include <functional>
#include <map>

#include "trainkit/nn/model.h"

namespace tk::nn {

class DeviceMirrors {
 public:
  // active: this replica keeps copies (replica > 0, or a device the host cannot address and that is here).
  // `synchronize` waits for the programs' queued work before a copy between host and device memory.
  DeviceMirrors(const Model& model, Device device, int replica, bool active, std::function<void()> synchronize);
  bool active() const { return active_; }
  // Where `w` lives for this replica's programs: the weight itself when not active, else its copy (made on the
  // device, from the model's weight, when `allocate`; null when missing and not allocating).
  Tensor* storage(const Weight& w, bool allocate);
  // The storage programs read for `w`: its copy when it has one, else the model's weight.
  const Tensor& current_value(const Weight& w) const;
  // Replica 0 only (no-ops otherwise, and when not active): upload copies the model's weights to the device unless
  // the copies were trained since the last download (force: even then — the host's are newer); download brings the
  // model's weights up to date when the copies are ahead.
  void upload(bool force = false);
  void download();
  void mark_trained() { ahead_ = active_ && replica_ == 0; }
  // Every weight's copy := `primary`'s storage (a replica > 0 starting a fit; copies made first).
  void copy_from(const DeviceMirrors& primary);
  // Device bytes the copies hold (256-byte granules).
  size_t bytes() const;

 private:
  // Every weight's copy := the model's weight (to_copies), or the other way; copies made first when `allocate`.
  void copy(bool to_copies, bool allocate);

  const Model& model_;
  Device device_;
  int replica_;
  bool active_;
  std::function<void()> synchronize_;
  std::map<uint64_t, Tensor> copies_;  // per Weight::id
  bool ahead_ = false;                 // the copies were trained since the model's weights were last updated
};

}  // namespace tk::nn
