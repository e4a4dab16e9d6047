// Asynchronous stages: prefetch (a producer thread and a bounded buffer) and map (sequential, or on a pool
// of threads with results kept in input order), both tunable by AUTOTUNE.
//
// Cancellation: an iterator's destructor calls cancel(), which wakes every thread blocked in this stage
// and cancels upstream, then joins its threads; blocked calls return "end of data" once cancelled.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <list>
#include <thread>
#include <utility>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

// AUTOTUNE re-evaluates on a doubling period, 10 ms up to 1 s (tf.data: 10 ms up to 60 s).
class TunePeriod {
 public:
  bool due() {
    const int64_t t = now_ns();
    if (next_ == 0) next_ = t + period_;
    if (t < next_) return false;
    period_ = std::min<int64_t>(period_ * 2, 1'000'000'000);
    next_ = t + period_;
    return true;
  }

 private:
  int64_t period_ = 10'000'000;
  int64_t next_ = 0;
};

// in.next(e), or false with what it threw in `err` (an error ends the stage's input like end of data).
bool next_or_error(IteratorImpl& in, Element& e, std::exception_ptr& err) {
  try {
    return in.next(e);
  } catch (...) {
    err = std::current_exception();
    return false;
  }
}

// ---- prefetch

class PrefetchIterator final : public IteratorImpl {
 public:
  PrefetchIterator(const PassContext& ctx, const Node& input, int64_t buffer)
      : IteratorImpl(ctx, "prefetch"), autotune_(buffer == AUTOTUNE), limit_(autotune_ ? 2 : buffer) {
    async_ = true;
    counters_->autotuned = autotune_;
    counters_->buffer_limit = limit_;
    in_ = input.make(ctx);
    thread_ = std::thread([this] { produce(); });
  }
  ~PrefetchIterator() override {
    cancel();
    thread_.join();
    release_all();
  }
  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    in_->cancel();
  }

 protected:
  bool do_next(Element& out) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (autotune_ && queue_.empty() && !done_ && taken_ > 0) grow();
    cv_.wait(lock, [&] { return !queue_.empty() || done_ || cancelled_; });
    if (!queue_.empty()) {
      out = std::move(queue_.front().first);
      account(-queue_.front().second);
      queue_.pop_front();
      ++taken_;
      lock.unlock();
      cv_.notify_all();
      return true;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return false;
  }

 private:
  void produce() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Autotuned: the depth is also bounded by the RAM budget (at least one element always fits).
        cv_.wait(lock, [&] {
          return cancelled_ || (static_cast<int64_t>(queue_.size()) < limit_ &&
                                (!autotune_ || queue_.empty() || pipeline_->may_buffer(elem_bytes_)));
        });
        if (cancelled_) break;
      }
      Element e;
      std::exception_ptr err;
      const bool ok = next_or_error(*in_, e, err);
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        done_ = true;
        error_ = err;
        cv_.notify_all();
        break;
      }
      const int64_t bytes = element_bytes(e);
      elem_bytes_ = bytes;
      account(bytes);
      queue_.emplace_back(std::move(e), bytes);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  // The consumer found the buffer empty: one more slot, if the RAM budget allows (tf.data's heuristic).
  void grow() {
    if (limit_ >= kMaxAutotunedDepth || !pipeline_->may_buffer(elem_bytes_)) return;
    ++limit_;
    counters_->buffer_limit = limit_;
    cv_.notify_all();
  }
  void release_all() {
    for (auto& [e, bytes] : queue_) account(-bytes);
    queue_.clear();
  }

  static constexpr int64_t kMaxAutotunedDepth = 256;
  std::unique_ptr<IteratorImpl> in_;
  const bool autotune_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::pair<Element, int64_t>> queue_;  // (element, bytes)
  int64_t limit_;
  int64_t taken_ = 0;
  int64_t elem_bytes_ = 0;
  bool done_ = false, cancelled_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

class PrefetchNode final : public UnaryNode {
 public:
  PrefetchNode(std::shared_ptr<Node> in, int64_t buffer) : UnaryNode(std::move(in)), buffer_(buffer) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    return std::make_unique<PrefetchIterator>(ctx, *inputs[0], buffer_);
  }
  int64_t cardinality() const override { return in_card(); }
  std::string label() const override {
    return "prefetch(" + (buffer_ == AUTOTUNE ? std::string("AUTOTUNE") : std::to_string(buffer_)) + ")";
  }
  Flow flow() const override { return {Flow::elementwise}; }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<PrefetchNode>(std::move(in), buffer_);
  }

 private:
  int64_t buffer_;
};

// ---- map

struct MapSpec {
  std::function<Element(Element, Rng&)> fn;
  bool uses_rng = false;
  MapOptions options;
  uint64_t seed = 0;
};

// Element `index` of pass `pass` always gets the same generator, whichever thread computes it.
Element apply(const MapSpec& m, uint64_t pass, uint64_t index, Element e) {
  if (!m.uses_rng) {
    static thread_local Rng unused;
    return m.fn(std::move(e), unused);
  }
  Rng rng(mix_seed(mix_seed(m.seed, pass), index));
  return m.fn(std::move(e), rng);
}

std::string stage_name(const MapSpec& m) { return m.options.name.empty() ? "map" : m.options.name; }

class SequentialMapIterator final : public IteratorImpl {
 public:
  SequentialMapIterator(const PassContext& ctx, const Node& input, const MapSpec& m)
      : IteratorImpl(ctx, stage_name(m), "map"), m_(m), pass_(ctx.pass) {
    in_ = input.make(ctx);
  }
  void cancel() override { in_->cancel(); }

 protected:
  bool do_next(Element& out) override {
    Element e;
    if (!in_->next(e)) return false;
    out = apply(m_, pass_, index_++, std::move(e));
    return true;
  }

 private:
  const MapSpec& m_;
  uint64_t pass_;
  uint64_t index_ = 0;
  std::unique_ptr<IteratorImpl> in_;
};

// Workers pull from upstream one at a time (so elements get consecutive indices), compute in parallel,
// and leave results in slots kept in input order; the consumer takes the oldest slot (deterministic) or
// any finished one.
class ParallelMapIterator final : public IteratorImpl {
 public:
  ParallelMapIterator(const PassContext& ctx, const Node& input, const MapSpec& m)
      : IteratorImpl(ctx, stage_name(m), "map"), m_(m), pass_(ctx.pass) {
    async_ = true;
    const bool autotune = m.options.num_parallel_calls == AUTOTUNE;
    max_threads_ = autotune ? pipeline_->cpu_budget : static_cast<int>(m.options.num_parallel_calls);
    active_ = max_threads_;  // AUTOTUNE starts wide and settles at the consumer's rate
    counters_->autotuned = autotune;
    set_parallelism(active_);
    in_ = input.make(ctx);
    try {
      for (int k = 0; k < max_threads_; ++k) threads_.emplace_back([this, k] { work(k); });
    } catch (...) {  // e.g. the thread limit: stop the threads already started before giving up
      cancel();
      for (std::thread& t : threads_) t.join();
      throw;
    }
  }
  ~ParallelMapIterator() override {
    cancel();
    for (std::thread& t : threads_) t.join();
    for (Slot& s : slots_) account(-s.bytes);
  }
  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    consumer_cv_.notify_all();
    idle_cv_.notify_all();
    room_cv_.notify_all();
    in_->cancel();
  }

 protected:
  bool do_next(Element& out) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (counters_->autotuned && tune_.due()) tune();
    auto ready = [&] {
      if (m_.options.deterministic)
        return slots_.empty() ? slots_.end() : (slots_.front().ready ? slots_.begin() : slots_.end());
      return std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.ready; });
    };
    std::list<Slot>::iterator it;
    consumer_waiting_ = true;  // workers wake the consumer only while it waits (a wake-up per element costs)
    consumer_cv_.wait(lock, [&] {
      it = ready();
      return it != slots_.end() || (slots_.empty() && in_done_) || cancelled_;
    });
    consumer_waiting_ = false;
    if (it == slots_.end()) return false;  // end of input, or cancelled
    Slot s = std::move(*it);
    slots_.erase(it);
    account(-s.bytes);
    lock.unlock();
    room_cv_.notify_one();  // at most one worker waits for room: the one holding pull_mu_
    if (s.error) std::rethrow_exception(s.error);
    out = std::move(s.value);
    return true;
  }

 private:
  struct Slot {
    Element value;
    std::exception_ptr error;
    int64_t bytes = 0;
    bool ready = false;
  };

  void work(int k) {
    while (true) {
      Element e;
      Slot* slot = nullptr;
      uint64_t index = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);  // threads beyond the tuned parallelism sleep here
        idle_cv_.wait(lock, [&] { return cancelled_ || in_done_ || k < active_; });
        if (cancelled_ || in_done_) return;
      }
      {
        std::unique_lock<std::mutex> pull_lock(pull_mu_);  // one upstream pull at a time, in order
        std::unique_lock<std::mutex> lock(mu_);
        room_cv_.wait(lock, [&] {
          return cancelled_ || in_done_ ||
                 (static_cast<int64_t>(slots_.size()) < limit_ &&
                  (!counters_->autotuned || slots_.empty() || pipeline_->may_buffer(elem_bytes_)));
        });
        if (cancelled_ || in_done_) return;
        lock.unlock();
        std::exception_ptr err;
        const bool ok = next_or_error(*in_, e, err);
        lock.lock();
        if (!ok) {
          in_done_ = true;
          if (err) slots_.push_back(Slot{{}, err, 0, true});  // in order: the consumer sees it in turn
          consumer_cv_.notify_all();
          idle_cv_.notify_all();
          room_cv_.notify_all();
          return;
        }
        slots_.emplace_back();
        slot = &slots_.back();
        index = next_index_++;
      }
      Slot result;
      const int64_t t0 = now_ns();
      try {
        result.value = apply(m_, pass_, index, std::move(e));
        result.bytes = element_bytes(result.value);
      } catch (...) {
        result.error = std::current_exception();
      }
      counters_->work_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
      bool wake = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        slot->value = std::move(result.value);
        slot->error = result.error;
        slot->bytes = result.bytes;
        slot->ready = true;
        account(result.bytes);
        elem_bytes_ = std::max(elem_bytes_, result.bytes);
        wake = consumer_waiting_ && (!m_.options.deterministic || slot == &slots_.front());
      }
      if (wake) consumer_cv_.notify_one();
    }
  }

  // Parallelism the consumer's measured rate needs: the map's time per element, times map elements per
  // consumer element, over the consumer's own time per element, with 25% headroom; within the CPU budget.
  void tune() {
    const int64_t done = counters_->elements.load();
    const int64_t root = pipeline_->root_elements.load();
    const int64_t away = pipeline_->root_away_ns.load();
    if (done < 4 || root < 2) return;
    const double per_elem = static_cast<double>(counters_->work_ns.load()) / static_cast<double>(done);
    const double elems_per_root = static_cast<double>(done) / static_cast<double>(root);
    const double consumer_per_root = static_cast<double>(away) / static_cast<double>(root);
    int want = max_threads_;
    if (consumer_per_root > 0) want = static_cast<int>(std::ceil(1.25 * per_elem * elems_per_root / consumer_per_root));
    want = std::clamp(want, 1, max_threads_);
    while (want > 1 && !pipeline_->may_buffer(elem_bytes_ * (2 * want - limit_))) --want;
    if (want != active_) set_parallelism(want);
  }
  void set_parallelism(int p) {
    active_ = p;
    limit_ = 2 * static_cast<int64_t>(p);
    counters_->parallelism = p;
    counters_->buffer_limit = limit_;
    idle_cv_.notify_all();
    room_cv_.notify_all();
  }

  const MapSpec& m_;
  uint64_t pass_;
  std::unique_ptr<IteratorImpl> in_;
  std::mutex pull_mu_;
  std::mutex mu_;
  std::condition_variable consumer_cv_, idle_cv_, room_cv_;
  std::list<Slot> slots_;  // input order; a list, so workers' pointers survive erasures
  uint64_t next_index_ = 0;
  int max_threads_ = 1;
  int active_ = 1;
  int64_t limit_ = 2;
  int64_t elem_bytes_ = 0;
  bool in_done_ = false, cancelled_ = false, consumer_waiting_ = false;
  TunePeriod tune_;
  std::vector<std::thread> threads_;
};

class MapNode final : public UnaryNode {
 public:
  MapNode(std::shared_ptr<Node> in, MapSpec m) : UnaryNode(std::move(in)), m_(std::move(m)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    if (m_.options.num_parallel_calls == 0) return std::make_unique<SequentialMapIterator>(ctx, *inputs[0], m_);
    return std::make_unique<ParallelMapIterator>(ctx, *inputs[0], m_);
  }
  int64_t cardinality() const override { return in_card(); }
  std::string label() const override {
    const int64_t p = m_.options.num_parallel_calls;
    std::string s = stage_name(m_);
    if (p == AUTOTUNE)
      s += "(AUTOTUNE)";
    else if (p > 0)
      s.append("(").append(std::to_string(p)).append(")");
    return s;
  }
  // A map that draws from an Rng depends on the element's position (its seed); one that is not deterministic
  // reorders elements.
  Flow flow() const override {
    if (m_.uses_rng) return {Flow::other, label() + " draws random numbers keyed by each element's position"};
    if (m_.options.num_parallel_calls != 0 && !m_.options.deterministic)
      return {Flow::other, label() + " is not deterministic (it may reorder elements)"};
    return {Flow::elementwise};
  }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<MapNode>(std::move(in), m_);
  }

 private:
  MapSpec m_;
};

}  // namespace

std::shared_ptr<Node> make_prefetch_node(std::shared_ptr<Node> in, int64_t buffer) {
  return std::make_shared<PrefetchNode>(std::move(in), buffer);
}

std::shared_ptr<Node> make_map_node(std::shared_ptr<Node> in, std::function<Element(Element, Rng&)> fn, bool uses_rng,
                                    MapOptions options) {
  if (options.num_parallel_calls < 0 && options.num_parallel_calls != AUTOTUNE)
    throw InvalidArgument("Dataset::map: num_parallel_calls must be >= 0 or AUTOTUNE, got " +
                          std::to_string(options.num_parallel_calls));
  MapSpec m{std::move(fn), uses_rng, std::move(options), 0};
  m.seed = uses_rng ? resolve_seed(m.options.seed) : 0;
  return std::make_shared<MapNode>(std::move(in), std::move(m));
}

}  // namespace tk::data
