#include "nn/training/array_batches.h"

#include <algorithm>
#include <numeric>

#include "nn/training/fit_common.h"
#include "trainkit/core/error.h"

namespace tk::nn {

ArrayBatches::ArrayBatches(const std::vector<Tensor>& x, const std::vector<Tensor>* y, int64_t batch, int64_t steps,
                           bool shuffle, uint64_t seed)
    : x_(x),
      y_(y),
      rows_(rows_of(x)),
      batch_(batch),
      steps_(steps > 0 ? steps : (rows_ + batch - 1) / batch),
      shuffle_(shuffle),
      seed_(seed),
      rng_(seed),
      perm_(static_cast<size_t>(rows_)) {
  std::iota(perm_.begin(), perm_.end(), 0);
}

void ArrayBatches::resume(const FitPosition& p) {
  if (p.dataset)
    throw InvalidArgument("fit: the restored state was saved by fit over a Dataset; resume it with the same Dataset");
  seed_ = p.shuffle_seed;
  rng_.seed(seed_);
  std::iota(perm_.begin(), perm_.end(), 0);
  shuffles_ = p.shuffles;
  if (shuffle_)  // the same permutations: replay the shuffles made before the save
    for (int64_t k = 0; k < shuffles_; ++k) std::shuffle(perm_.begin(), perm_.end(), rng_);
}

void ArrayBatches::begin_epoch(int64_t start) {
  if (start == 0 && shuffle_) {  // a resumed epoch keeps the permutation it started with
    std::shuffle(perm_.begin(), perm_.end(), rng_);
    ++shuffles_;
  }
  cursor_ = 0;
  taken_ = start;
  for (int64_t s = 0; s < start; ++s) {  // the batches trained on before the save
    if (cursor_ >= rows_) cursor_ = 0;
    cursor_ += std::min(batch_, rows_ - cursor_);
  }
}

bool ArrayBatches::next(size_t /*slot*/, Batch& b) {
  if (taken_ == steps_) return false;
  if (cursor_ >= rows_) cursor_ = 0;  // steps_per_epoch beyond one pass wraps around
  b.x = &x_;
  b.y = y_;
  b.rows = perm_.data() + cursor_;
  b.begin = cursor_;
  b.n = std::min(batch_, rows_ - cursor_);
  cursor_ += b.n;
  ++taken_;
  return true;
}

void ArrayBatches::record(FitPosition& p, bool /*epoch_end*/) const {
  p.dataset = false;
  p.shuffle_seed = seed_;
  p.shuffles = shuffles_;
}

}  // namespace tk::nn
