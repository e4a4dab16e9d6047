// Logs read one step late (issue 13): fit's loops queue step k+1 (and gather and stage its batch) before they read
// step k's loss and metrics, so on a GPU the host prepares the next batch while the device runs the current step,
// instead of synchronizing after every step.
//
// Each step's log values go into a slot: on a device whose backend has read-back slots (graph::ReadbackSlots; CUDA:
// pinned host memory) an asynchronous copy on the program's stream and an event after it, on the CPU the values
// themselves (read at once). With lag L, batch k's logs are delivered (added to the epoch's Accumulator, then
// on_train_batch_end(k)) after batch k+L was queued, and every pending batch is delivered at the end of the epoch
// (flush) or when training stops.
//
// The lag (log_lag): 1 on CUDA, 0 on the CPU (the CPU keeps its exact behaviour: no LaggedLogs at all), and 0 where a
// step's outcome decides the next step's inputs on the host: dynamic loss scaling (a skipped step is no optimizer
// iteration, and the iteration count is a host-side scalar of the next step: Adam's bias correction, schedules) and
// data parallel steps (their replicas' logs are merged on their threads). TK_LOG_LAG=0|1 overrides the device's
// default (tests force 1 on the CPU), never those two. What a lag of 1 means for callbacks, deterministically:
//   - on_train_batch_end(k) gets batch k's own logs (the epoch's running means up to k), in batch order, as with 0;
//   - on_train_batch_begin(k+1) is called before on_train_batch_end(k) (it precedes batch k+1's step, which is queued
//     before batch k's logs are read); what a callback reads of the model in on_train_batch_end(k) (weights,
//     iterations, the training position) already includes batch k+1;
//   - stop_training set in on_train_batch_end(k) (TerminateOnNaN, a user's callback) stops after batch k+1, which was
//     already queued: batch k+1 is trained and its on_train_batch_end is still called, then the epoch ends;
//   - the logs on_train_batch_begin(k+1) receives are the running means up to batch k-1 (batch k's are not read yet);
//   - at the end of an epoch every batch is delivered before validation and on_epoch_end: nothing crosses epochs;
//   - an exception leaving the epoch's loop (a callback, the dataset, train_step) first delivers the batches that
//     trained and were not delivered yet (DeliverOnUnwind, fit_common.h), except when it came from a delivery itself
//     (a wait for a step's logs, or on_train_batch_end); the step being queued when it was thrown is never delivered.
//
//   nn::LaggedLogs lagged(1, nn::LaggedLogs::store_for(device, 2));   // or host_store()
//   lagged.begin(s); run the step's programs, lagged.add(c, rows) after each; lagged.end();
//   while (lagged.ready()) { int64_t b = lagged.deliver(acc); acc.write(logs); on_train_batch_end(b, logs); }
//   while (lagged.pending()) ...deliver...      // end of the epoch
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/compiler/log_stats.h"
#include "trainkit/core/device.h"

namespace tk::nn {

struct Compiled;
struct Accumulator;

// The lag for fit on `device` (above); TK_LOG_LAG=0|1 overrides the device's default.
int log_lag(Device device, bool loss_scaling, bool replicated);

// Where a step's log values wait for the host. Slots are reused in turn (lag + 1 of them).
class LogStore {
 public:
  virtual ~LogStore() = default;
  virtual size_t capacity(int slot) const = 0;
  // Grows the slot's buffer to at least `bytes`, keeping its first `keep` bytes (the caller has synchronized with
  // every copy queued into it).
  virtual void grow(int slot, size_t bytes, size_t keep) = 0;
  virtual const void* data(int slot) const = 0;
  // Queues the copy of `bytes` of program output `value` into the slot's buffer at `offset`.
  virtual void queue(int slot, Compiled& c, int value, size_t offset, size_t bytes) = 0;
  // The step's copies are all queued (CUDA: an event after them, on `stream`, the stream its programs ran on: a
  // ProgramCache's, which outlives the programs it evicts).
  virtual void seal(int slot, void* stream) = 0;
  // Waits until the slot's copies are done.
  virtual void wait(int slot) = 0;
};

class LaggedLogs {
 public:
  LaggedLogs(int lag, std::unique_ptr<LogStore> store);
  ~LaggedLogs() { discard(); }
  LaggedLogs(const LaggedLogs&) = delete;
  LaggedLogs& operator=(const LaggedLogs&) = delete;
  // A store reading the values at once (Program::read_output): the CPU, and tests.
  static std::unique_ptr<LogStore> host_store();
  // `slots` read-back slots of the device's backend (CUDA: pinned memory and events); host_store() on the CPU and on a
  // device whose backend has none.
  static std::unique_ptr<LogStore> store_for(Device device, int slots);

  int lag() const { return lag_; }
  // Batch `batch`'s step is about to be queued.
  void begin(int64_t batch);
  // One of its programs ran over `rows` rows (micro-batching: each micro-batch's program). Nothing of `c` is kept:
  // a later ProgramCache::get may evict it (its stream, the cache's, is).
  void add(Compiled& c, int64_t rows);
  // Its last program ran.
  void end();
  // A batch is lag steps behind the newest queued one: deliver() may read it without waiting for the newest.
  bool ready() const { return static_cast<int>(pending_.size()) > lag_; }
  bool pending() const { return !pending_.empty(); }
  // The oldest pending batch: waits for its values, adds them to acc (row-weighted, as Accumulator::add), returns it.
  // The caller calls delivered() once the batch's on_train_batch_end returned.
  int64_t deliver(Accumulator& acc);
  void delivered() { delivering_ = false; }
  // A deliver() threw, or the on_train_batch_end after it did: nothing more may be delivered.
  bool delivery_failed() const { return delivering_; }
  // An exception left the step between begin() and end(): the step is dropped (never delivered; its copies already
  // queued are sealed, so the store waits for them before freeing their memory). Never throws.
  void abandon_open() noexcept;
  // Forgets every batch not delivered (abandon_open, then the pending ones; the store waits for their copies when it
  // is destroyed). Never throws.
  void discard() noexcept;

 private:
  struct Entry {  // one program run of a step
    std::vector<std::string> names;
    std::vector<uint8_t> dtypes;  // per log: DType
    std::vector<LogStat> stats;   // per log: its width (counts of a stateful metric) and how it combines
    size_t offset;                // of its first value in the slot
    int64_t rows;
  };
  struct Step {
    int64_t batch = 0;
    int slot = 0;
    size_t bytes = 0;  // queued into the slot so far
    size_t used = 0;   // entries of this step (the vector keeps older ones for reuse)
    std::vector<Entry> entries;
  };
  int lag_;
  std::unique_ptr<LogStore> store_;
  std::vector<Step> steps_;   // per slot (lag + 1), reused
  std::vector<int> pending_;  // slots of queued, undelivered steps, oldest first
  int next_slot_ = 0;
  int open_ = -1;                // the slot of the step between begin() and end()
  void* open_stream_ = nullptr;  // the stream of the open step's last program (never a Compiled*: get() may evict it)
  bool open_added_ = false;      // add() queued copies into the open slot
  bool delivering_ = false;      // between deliver() and delivered()
};

}  // namespace tk::nn
