// Internals of the input pipeline: definition nodes (immutable, shared by Dataset copies) and the
// iterators a pass creates from them (one per stage, owned by the stage downstream).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainkit/data/dataset.h"

namespace tk::data {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// splitmix64: seeds derived from (seed, pass, index) so randomness never depends on thread timing.
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A seed for a node created without one: from set_global_seed (and a per-node counter, as tf.data's op
// seeds), else from std::random_device.
uint64_t resolve_seed(uint64_t seed);

// Live counters of one stage, shared between the stage's threads and Iterator::stats().
struct StageCounters {
  std::string name;
  std::string kind;  // "map", "prefetch", "source", ... (for advice; names can be user-chosen)
  std::atomic<int64_t> elements{0};
  std::atomic<int64_t> work_ns{0};
  std::atomic<int64_t> wait_ns{0};
  std::atomic<int> parallelism{1};
  std::atomic<int64_t> buffer_limit{0};
  std::atomic<int64_t> buffered_bytes{0};
  std::atomic<bool> autotuned{false};
  std::atomic<bool> live{true};  // false once its iterator is gone: a later pass's stage reuses it
};

// Shared by all stages of one pass.
struct Pipeline {
  size_t ram_budget = 0;
  int cpu_budget = 1;
  std::atomic<int64_t> buffered_bytes{0};  // all asynchronous buffers
  // The final consumer: elements it took and the time it spent away between calls (its own work), which
  // AUTOTUNE uses as the rate to aim at.
  std::atomic<int64_t> root_elements{0};
  std::atomic<int64_t> root_away_ns{0};
  std::mutex stages_mu;
  std::vector<std::shared_ptr<StageCounters>> stages;
  // Counters for a new stage: a released stage of the same name and kind is reused, so repeat / interleave
  // passes accumulate into one entry instead of adding one per pass.
  std::shared_ptr<StageCounters> add_stage(std::string name, std::string kind);
  // True when buffering `bytes` more keeps the pipeline within its RAM budget.
  bool may_buffer(int64_t bytes) const {
    const int64_t budget = ram_budget > static_cast<size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(ram_budget);
    return buffered_bytes.load(std::memory_order_relaxed) + bytes <= budget;
  }
};

struct PassContext {
  std::shared_ptr<Pipeline> pipeline;
  uint64_t pass = 0;  // which pass over this node (seeds reshuffling); derived for nested passes
};

// Random access into a source whose elements are rows of arrays (from_tensor_slices, range, on_device):
// shuffle / take / skip / shard / repeat pass row indices along, and batch gathers whole batches at once.
class RandomAccess {
 public:
  virtual ~RandomAccess() = default;
  virtual int64_t size() const = 0;
  // out = rows idx[0..n) stacked: component shapes (n, ...).
  virtual void gather(const int64_t* idx, int64_t n, Element& out) const = 0;
  // out = row i: component shapes (...).
  virtual void get(int64_t i, Element& out) const = 0;
};

class IteratorImpl {
 public:
  IteratorImpl(const PassContext& ctx, std::string name, std::string kind = {});
  virtual ~IteratorImpl() { counters_->live = false; }
  IteratorImpl(const IteratorImpl&) = delete;
  IteratorImpl& operator=(const IteratorImpl&) = delete;

  // Timed: the stage's own time (upstream stages excluded) goes to its counters.
  bool next(Element& out);
  // Stops threads blocked in this stage and upstream (called before destruction).
  virtual void cancel() {}
  // Non-null when this stage yields rows of a random-access source; then next_index may replace next.
  virtual const RandomAccess* indexed() const { return nullptr; }
  virtual bool next_index(int64_t& index);

  StageCounters& counters() { return *counters_; }
  const std::shared_ptr<Pipeline>& pipeline() const { return pipeline_; }

 protected:
  virtual bool do_next(Element& out) = 0;
  // Adds `bytes` (negative: releases them) to the buffered bytes of the pipeline and of this stage.
  void account(int64_t bytes) {
    pipeline_->buffered_bytes.fetch_add(bytes, std::memory_order_relaxed);
    counters_->buffered_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Asynchronous stages: the consumer's time inside next() is waiting, not work.
  bool async_ = false;
  std::shared_ptr<Pipeline> pipeline_;
  std::shared_ptr<StageCounters> counters_;
};

// How a stage's elements follow from its input's, for rewrites of a pipeline (auto_shard.cpp).
struct Flow {
  enum Kind {
    other,        // anything else: a rewrite cannot look through it (`why` says what it is)
    elementwise,  // element i is made from input element i alone, in order, whatever its position (map, prefetch)
    batch,        // batch(batch_size, drop_remainder)
    repeat,       // the input's passes one after another
  };
  Kind kind = other;
  std::string why = {};
  int64_t batch_size = 0;
  bool drop_remainder = false;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual std::string label() const = 0;  // "batch(128)"
  virtual Flow flow() const { return {Flow::other, label()}; }
  // This stage, the same in all but its input (its seeds too); null for stages a rewrite does not copy.
  virtual std::shared_ptr<Node> with_input(std::shared_ptr<Node>) const { return nullptr; }
  // True for stages that only select, reorder, group or buffer their input's rows (shuffle, batch, take, skip, shard,
  // repeat, prefetch, with_options): over a device-resident source they run on row indices (device_batches.h).
  virtual bool moves_rows() const { return false; }
  // A source's arrays when its elements are their rows (from_tensor_slices, on_device); null for other stages.
  virtual const std::vector<Tensor>* source_arrays() const { return nullptr; }
  std::vector<std::shared_ptr<Node>> inputs;
  std::optional<Options> options;  // set by with_options
  mutable std::atomic<uint64_t> passes{0};
};

// A stage with one input, inputs[0].
class UnaryNode : public Node {
 public:
  explicit UnaryNode(std::shared_ptr<Node> in) { inputs = {std::move(in)}; }
  int64_t in_card() const { return inputs[0]->cardinality(); }
};

// The options of the pipeline ending at `node` (with_options merged, the outermost first).
Options pipeline_options(const Node& node);

// A pass over `d` numbered `pass` (fit numbers passes by the user's dataset, not by its own wrapper).
Iterator make_iterator(const Dataset& d, uint64_t pass);

// Bytes held by an element's tensors.
int64_t element_bytes(const Element& e);
// Stacks equal-shaped elements into one: component shapes (n, ...). Errors name the stage and element.
void stack_elements(const std::vector<Element>& items, size_t n, Element& out, const char* stage);

// Node factories, one file per family.
std::shared_ptr<Node> make_slices_node(std::vector<Tensor> arrays, std::string name);
std::shared_ptr<Node> make_range_node(int64_t start, int64_t stop, int64_t step);
std::shared_ptr<Node> make_generator_node(std::function<Dataset::Generator()> make, std::string name);
std::shared_ptr<Node> make_reader_node(std::function<std::unique_ptr<ElementReader>()> open, std::string name);
std::shared_ptr<Node> make_zip_node(std::vector<std::shared_ptr<Node>> inputs);
std::shared_ptr<Node> make_filter_node(std::shared_ptr<Node> in, std::function<bool(const Element&)> predicate);
std::shared_ptr<Node> make_shuffle_node(std::shared_ptr<Node> in, int64_t buffer, uint64_t seed, bool reshuffle);
std::shared_ptr<Node> make_batch_node(std::shared_ptr<Node> in, int64_t batch, bool drop_remainder);
struct PadSpec;
struct BucketSpec;
std::shared_ptr<Node> make_padded_batch_node(std::shared_ptr<Node> in, int64_t batch, PadSpec spec,
                                             bool drop_remainder);
std::shared_ptr<Node> make_bucket_node(std::shared_ptr<Node> in, BucketSpec spec);
std::shared_ptr<Node> make_window_node(std::shared_ptr<Node> in, int64_t size, int64_t shift, int64_t stride,
                                       bool drop_remainder);
std::shared_ptr<Node> make_unbatch_node(std::shared_ptr<Node> in);
std::shared_ptr<Node> make_repeat_node(std::shared_ptr<Node> in, int64_t count);
std::shared_ptr<Node> make_take_node(std::shared_ptr<Node> in, int64_t count);
std::shared_ptr<Node> make_skip_node(std::shared_ptr<Node> in, int64_t count);
std::shared_ptr<Node> make_shard_node(std::shared_ptr<Node> in, int64_t num_shards, int64_t index);
std::shared_ptr<Node> make_cache_node(std::shared_ptr<Node> in, std::string filename);
std::shared_ptr<Node> make_prefetch_node(std::shared_ptr<Node> in, int64_t buffer);
std::shared_ptr<Node> make_map_node(std::shared_ptr<Node> in, std::function<Element(Element, Rng&)> fn, bool uses_rng,
                                    MapOptions options);
std::shared_ptr<Node> make_interleave_node(std::shared_ptr<Node> in, std::function<Dataset(const Element&)> fn,
                                           InterleaveOptions options);

}  // namespace tk::data
