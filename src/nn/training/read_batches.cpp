#include "nn/training/read_batches.h"

#include <algorithm>

namespace tk::nn {

DatasetReads::DatasetReads(const data::Dataset& dataset, Setup setup, int replicas)
    : setup_(std::move(setup)),
      it_(evaluation_pass(dataset, staged(setup_.on_device ? setup_.on_device->indices() : dataset))),
      slots_(static_cast<size_t>(std::max(replicas, 1))) {}

bool DatasetReads::next(size_t slot, Batch& b) {
  Slot& s = slots_.at(slot);
  if (!it_.next(s.element)) return false;
  if (setup_.on_device) {
    if (first_) {  // the model is built from the arrays' row shapes
      setup_.on_device->stand_ins(setup_.inputs, setup_.outputs, setup_.need_y, s.x, s.y,
                                  setup_.need_y ? "evaluate" : "predict");
      setup_.prepare(s.x, s.y);
    }
    b.n = setup_.on_device->split(s.element, setup_.inputs, s.x, s.y, setup_.need_y, s.rows);
  } else {
    setup_.split(s.element, s.x, s.y);
    setup_.prepare(s.x, s.y);
    s.rows = nullptr;
    b.n = s.x[0].dim(0);
  }
  first_ = false;
  b.x = &s.x;
  b.y = setup_.need_y ? &s.y : nullptr;
  b.rows = s.rows;
  b.begin = 0;
  return true;
}

}  // namespace tk::nn
