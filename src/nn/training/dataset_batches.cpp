#include "nn/training/dataset_batches.h"

#include <cstdio>

#include "data/auto_shard.h"
#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::nn {
namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

DatasetBatches::DatasetBatches(const data::Dataset& dataset, Setup setup, int64_t steps_per_epoch, int epochs)
    : dataset_(dataset),
      setup_(std::move(setup)),
      pipeline_(staged(setup_.on_device ? setup_.on_device->indices()
                       : setup_.share   ? setup_.share->dataset
                                        : dataset)),
      global_(setup_.share ? setup_.share->global_batches : nullptr),
      persistent_(steps_per_epoch > 0),
      steps_per_epoch_(steps_per_epoch),
      epochs_(epochs) {
  const int64_t card = dataset.cardinality();
  steps_ = steps_per_epoch > 0 ? steps_per_epoch : (card >= 0 ? card : 0);
  // Passes are numbered by the user's dataset (reshuffling continues across fit calls), not by the wrapper.
  open(dataset_.node()->passes.fetch_add(1));
  const auto t0 = Clock::now();
  pending_ = pull(element_);  // the first batch builds the model
  first_wait_s_ = since(t0);
  if (!pending_) throw InvalidArgument("fit: the dataset yielded no batch (" + dataset.describe() + ")");
  consumed_ = 1;
  if (setup_.on_device)
    setup_.on_device->stand_ins(setup_.inputs, setup_.outputs, true, x_, y_, "fit");
  else
    setup_.split(element_, x_, y_);
}

void DatasetBatches::open(uint64_t pass) {
  it_ = data::Iterator();         // stop the last pass's threads before starting the next
  if (global_) global_->clear();  // they are gone: nothing pushes now
  pass_ = pass;
  it_ = data::make_iterator(pipeline_, pass);
  consumed_ = 0;
  pending_ = false;
}

bool DatasetBatches::pull(data::Element& out) {
  if (!it_.next(out)) return false;
  global_rows_ = global_ ? global_->pop() : 0;
  return true;
}

void DatasetBatches::resume(const FitPosition& r) {
  if (!r.dataset)
    throw InvalidArgument("fit: the restored state was saved by fit over arrays; resume it with the same arrays");
  // The same pass as when the state was saved, at the same batch; the user's counter moves past it.
  std::atomic<uint64_t>& passes = dataset_.node()->passes;
  for (uint64_t seen = passes.load(); seen <= r.data_pass && !passes.compare_exchange_weak(seen, r.data_pass + 1);) {
  }
  open(r.data_pass);
  for (consumed_ = 0; consumed_ < r.pass_offset; ++consumed_)
    if (!pull(element_))
      throw InvalidArgument("fit: resuming needs batch " + std::to_string(r.pass_offset) + " of pass " +
                            std::to_string(pass_) + " but the dataset ends after " + std::to_string(consumed_) +
                            " (resume with the dataset the state was saved with: " + dataset_.describe() + ")");
  next_pass_ = false;
}

void DatasetBatches::begin_epoch(int64_t /*start*/) {
  if (next_pass_) open(dataset_.node()->passes.fetch_add(1));
  next_pass_ = !persistent_;
  meter_.reset();
}

bool DatasetBatches::next(size_t /*slot*/, Batch& b) {
  const auto t0 = Clock::now();
  if (!pending_ && !pull(element_)) {
    if (persistent_ && setup_.chief)
      std::printf(
          "WARNING: Your input ran out of data; interrupting training. Make sure that your dataset can generate at "
          "least steps_per_epoch * epochs batches (%lld); you may need to use repeat().\n",
          static_cast<long long>(steps_per_epoch_ * epochs_));
    return false;
  }
  meter_.add_wait(pending_ && first_step_ ? first_wait_s_ : since(t0));
  first_step_ = false;
  if (!pending_) ++consumed_;
  pending_ = false;
  staged_at_ = Clock::now();
  int64_t n = 0;
  if (setup_.on_device) {
    n = setup_.on_device->split(element_, setup_.inputs, x_, y_, true, rows_);
  } else {
    setup_.split(element_, x_, y_);
    setup_.check(x_, y_);
    n = x_[0].dim(0);
  }
  b.x = &x_;
  b.y = &y_;
  b.rows = rows_;
  b.n = global_ ? global_rows_ : n;
  b.own_rows = global_ != nullptr;
  return true;
}

void DatasetBatches::step_done() { meter_.add_compute(since(staged_at_)); }

void DatasetBatches::record(FitPosition& p, bool epoch_end) const {
  p.dataset = true;
  // After an epoch a state resumes with the next one: a new pass, or (persistent) this one where it stands.
  p.data_pass = epoch_end && !persistent_ ? dataset_.node()->passes.load() : pass_;
  p.pass_offset = epoch_end && !persistent_ ? 0 : consumed_;
}

void DatasetBatches::end_epoch(Logs& logs) {
  report_ = meter_.report(it_.stats());
  logs.set("input_wait_fraction", report_.wait_fraction);
  logs.set("input_wait_p50_ms", report_.p50_wait_ms);
  logs.set("input_wait_p99_ms", report_.p99_wait_ms);
}

void DatasetBatches::after_epoch(bool verbose) {
  if (verbose && !report_.advice.empty() && advised_.insert(report_.verdict + report_.slowest_stage).second)
    std::printf("Input pipeline: %s. %s\n", report_.summary().c_str(), report_.advice.c_str());
}

}  // namespace tk::nn
