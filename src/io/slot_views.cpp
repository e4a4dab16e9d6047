// optimizer_slot_views: the optimizer slots a save writes, from their own memory (keras_internal.h).
#include "io/keras_internal.h"
#include "nn/compiler/programs.h"
#include "nn/optimizer_rule.h"
#include "nn/training/trainer.h"

namespace tk::io::keras {

std::vector<std::vector<SlotView>> optimizer_slot_views(const Model& model) {
  if (!model.optimizer()) throw InvalidArgument("optimizer_slot_views: model '" + model.name() + "' is not compiled");
  const Optimizer& opt = *model.optimizer();
  const nn::ProgramCache& programs = model.trainer().programs();
  programs.synchronize();  // queued steps write the slots
  std::vector<std::vector<SlotView>> out;
  for (const Weight* w : model.trainable_weights()) {
    const std::vector<Tensor>* live = programs.optimizer_state().live_slots(*w);
    std::vector<SlotView>& views = out.emplace_back();
    for (int s = 0; s < opt.slots_per_variable(); ++s) {
      if (live)
        views.push_back({(*live)[static_cast<size_t>(s)]});
      else  // before the first step: the value the slot starts from
        views.push_back({Tensor(), nn::slot_shape(opt, s, w->value.shape()), nn::slot_initial_value(opt, s)});
    }
  }
  return out;
}

}  // namespace tk::io::keras
