// Synchronous transformations: filter, shuffle, batch, unbatch, repeat, take, skip, shard.
// Over a random-access source, shuffle / repeat / take / skip / shard move row indices instead of
// elements and batch gathers whole batches in one copy per component: the same elements in the same
// order as the element-by-element path, without a tensor per row.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

// A stage with one input, created in the constructor body so that stages register downstream first.
// `forward_index`: over a random-access input, the stage moves row indices (indexed() passes it along).
class UnaryIterator : public IteratorImpl {
 public:
  UnaryIterator(const PassContext& ctx, std::string name, const Node& input, uint64_t input_pass,
                bool forward_index = false)
      : IteratorImpl(ctx, std::move(name)) {
    in_ = input.make({ctx.pipeline, input_pass});
    forwards_index_ = forward_index && in_->indexed() != nullptr;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(swap_mu_);
    cancelled_ = true;
    if (in_) in_->cancel();
  }
  const RandomAccess* indexed() const override { return forwards_index_ ? in_->indexed() : nullptr; }

 protected:
  // Replaces the input (repeat's next pass); false once cancelled. cancel() may run on another thread.
  bool replace_input(const Node& node, uint64_t pass) {
    std::unique_ptr<IteratorImpl> old;
    {
      std::lock_guard<std::mutex> lock(swap_mu_);
      if (cancelled_) return false;
      old = std::move(in_);
    }
    old.reset();  // the finished pass's stages go first, so the new pass's stages reuse their counters
    std::unique_ptr<IteratorImpl> fresh = node.make({pipeline_, pass});
    std::lock_guard<std::mutex> lock(swap_mu_);
    in_ = std::move(fresh);
    if (cancelled_) in_->cancel();
    return true;
  }
  // Upstream's next element or row index, whichever this pass uses.
  bool pull(Element& e) { return in_->next(e); }
  bool pull_index(int64_t& i) { return in_->next_index(i); }
  std::unique_ptr<IteratorImpl> in_;
  bool forwards_index_ = false;

 private:
  std::mutex swap_mu_;
  bool cancelled_ = false;
};

// ---- filter

class FilterNode final : public UnaryNode {
 public:
  FilterNode(std::shared_ptr<Node> in, std::function<bool(const Element&)> p) : UnaryNode(std::move(in)), p_(p) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    class It final : public UnaryIterator {
     public:
      It(const PassContext& c, const FilterNode& n) : UnaryIterator(c, "filter", *n.inputs[0], c.pass), n_(n) {}

     protected:
      bool do_next(Element& out) override {
        while (pull(out))
          if (n_.p_(out)) return true;
        return false;
      }
      const FilterNode& n_;
    };
    return std::make_unique<It>(ctx, *this);
  }
  int64_t cardinality() const override {
    return in_card() == kInfiniteCardinality ? kInfiniteCardinality : kUnknownCardinality;
  }
  std::string label() const override { return "filter"; }
  std::function<bool(const Element&)> p_;
};

// ---- shuffle: uniform draws from a buffer refilled from upstream (tf.data's algorithm)

class ShuffleNode final : public UnaryNode {
 public:
  ShuffleNode(std::shared_ptr<Node> in, int64_t buffer, uint64_t seed, bool reshuffle)
      : UnaryNode(std::move(in)), buffer_(buffer), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override { return in_card(); }
  std::string label() const override { return "shuffle(" + std::to_string(buffer_) + ")"; }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<ShuffleNode>(std::move(in), buffer_, seed_, reshuffle_);
  }

 private:
  class It final : public UnaryIterator {
   public:
    It(const PassContext& c, const ShuffleNode& n)
        : UnaryIterator(c, "shuffle", *n.inputs[0], c.pass, true),
          limit_(n.buffer_),
          rng_(n.reshuffle_ ? mix_seed(n.seed_, c.pass) : n.seed_) {}
    bool next_index(int64_t& index) override {
      return draw(indices_, index, [&](int64_t& i) { return pull_index(i); });
    }

   protected:
    bool do_next(Element& out) override {
      if (forwards_index_) {
        int64_t i = 0;
        if (!next_index(i)) return false;
        in_->indexed()->get(i, out);
        return true;
      }
      return draw(items_, out, [&](Element& e) { return pull(e); });
    }

   private:
    // Tops `buf` up from upstream to the buffer size, then moves a uniformly drawn entry of it to `out`.
    template <typename T, typename Pull>
    bool draw(std::vector<T>& buf, T& out, Pull pull_one) {
      while (!in_done_ && static_cast<int64_t>(buf.size()) < limit_) {
        T v{};
        if (pull_one(v))
          buf.push_back(std::move(v));
        else
          in_done_ = true;
      }
      if (buf.empty()) return false;
      const size_t k = static_cast<size_t>(std::uniform_int_distribution<uint64_t>(0, buf.size() - 1)(rng_));
      out = std::move(buf[k]);
      if (k + 1 != buf.size()) buf[k] = std::move(buf.back());
      buf.pop_back();
      return true;
    }
    int64_t limit_;
    Rng rng_;
    bool in_done_ = false;
    std::vector<Element> items_;
    std::vector<int64_t> indices_;
  };
  int64_t buffer_;
  uint64_t seed_;
  bool reshuffle_;
};

// ---- batch

class BatchNode final : public UnaryNode {
 public:
  BatchNode(std::shared_ptr<Node> in, int64_t batch, bool drop)
      : UnaryNode(std::move(in)), batch_(batch), drop_(drop) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = in_card();
    if (c < 0) return c;
    return drop_ ? c / batch_ : (c + batch_ - 1) / batch_;
  }
  std::string label() const override {
    return "batch(" + std::to_string(batch_) + (drop_ ? ", drop_remainder" : "") + ")";
  }
  Flow flow() const override { return {Flow::batch, {}, batch_, drop_}; }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<BatchNode>(std::move(in), batch_, drop_);
  }

 private:
  class It final : public UnaryIterator {
   public:
    It(const PassContext& c, const BatchNode& n)
        : UnaryIterator(c, "batch", *n.inputs[0], c.pass), batch_(n.batch_), drop_(n.drop_) {
      source_ = in_->indexed();
      if (source_)
        idx_.resize(static_cast<size_t>(batch_));
      else
        items_.resize(static_cast<size_t>(batch_));
    }

   protected:
    bool do_next(Element& out) override {
      int64_t n = 0;
      if (source_) {
        while (n < batch_ && pull_index(idx_[static_cast<size_t>(n)])) ++n;
        if (n == 0 || (drop_ && n < batch_)) return false;
        source_->gather(idx_.data(), n, out);
        return true;
      }
      while (n < batch_ && pull(items_[static_cast<size_t>(n)])) ++n;
      if (n == 0 || (drop_ && n < batch_)) return false;
      stack_elements(items_, static_cast<size_t>(n), out, "batch");
      return true;
    }

   private:
    int64_t batch_;
    bool drop_;
    const RandomAccess* source_ = nullptr;
    std::vector<int64_t> idx_;
    std::vector<Element> items_;
  };
  int64_t batch_;
  bool drop_;
};

// ---- unbatch

class UnbatchNode final : public UnaryNode {
 public:
  explicit UnbatchNode(std::shared_ptr<Node> in) : UnaryNode(std::move(in)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    class It final : public UnaryIterator {
     public:
      It(const PassContext& c, const UnbatchNode& n) : UnaryIterator(c, "unbatch", *n.inputs[0], c.pass) {}

     protected:
      bool do_next(Element& out) override {
        while (row_ >= rows_) {
          if (!pull(current_)) return false;
          if (current_.empty() || current_[0].shape().rank() == 0)
            throw InvalidArgument("unbatch: element " + shapes_of(current_) +
                                  " has a scalar component; every component needs a batch dimension");
          rows_ = current_[0].dim(0);
          for (const Tensor& t : current_)
            if (t.shape().rank() == 0 || t.dim(0) != rows_)
              throw InvalidArgument("unbatch: the components of " + shapes_of(current_) +
                                    " differ in dimension 0; unbatch needs one batch size for all");
          row_ = 0;
        }
        out.resize(current_.size());
        for (size_t c = 0; c < current_.size(); ++c) {
          Tensor t(current_[c].shape().sample_shape(), current_[c].dtype(), current_[c].device(), "dataset/element");
          if (t.nbytes())
            std::memcpy(t.raw(), static_cast<const char*>(current_[c].raw()) + static_cast<size_t>(row_) * t.nbytes(),
                        t.nbytes());
          out[c] = std::move(t);
        }
        ++row_;
        return true;
      }

     private:
      Element current_;
      int64_t rows_ = 0, row_ = 0;
    };
    return std::make_unique<It>(ctx, *this);
  }
  int64_t cardinality() const override {
    return in_card() == kInfiniteCardinality ? kInfiniteCardinality : kUnknownCardinality;
  }
  std::string label() const override { return "unbatch"; }
};

// ---- repeat: a fresh upstream pass per repetition (reshuffled when asked)

class RepeatNode final : public UnaryNode {
 public:
  RepeatNode(std::shared_ptr<Node> in, int64_t count) : UnaryNode(std::move(in)), count_(count) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = in_card();
    if (count_ == 0 || c == 0) return 0;
    if (count_ < 0 || c == kInfiniteCardinality) return kInfiniteCardinality;
    if (c == kUnknownCardinality) return kUnknownCardinality;
    return c * count_;
  }
  std::string label() const override { return count_ < 0 ? "repeat" : "repeat(" + std::to_string(count_) + ")"; }
  Flow flow() const override { return {Flow::repeat}; }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<RepeatNode>(std::move(in), count_);
  }

 private:
  class It final : public UnaryIterator {
   public:
    It(const PassContext& c, const RepeatNode& n)
        : UnaryIterator(c, "repeat", *n.inputs[0], mix_seed(c.pass, 0), true), n_(n), pass_(c.pass) {}
    bool next_index(int64_t& index) override {
      return advance([&] { return pull_index(index); });
    }

   protected:
    bool do_next(Element& out) override {
      return advance([&] { return pull(out); });
    }

   private:
    template <typename Pull>
    bool advance(Pull pull_one) {
      if (n_.count_ == 0) return false;
      for (int empty_passes = 0;;) {
        if (pull_one()) return true;
        ++rep_;
        if (n_.count_ > 0 && rep_ >= n_.count_) return false;
        if (n_.count_ < 0 && ++empty_passes > 1) return false;  // an empty input repeated forever is empty
        if (!replace_input(*n_.inputs[0], mix_seed(pass_, static_cast<uint64_t>(rep_)))) return false;
      }
    }
    const RepeatNode& n_;
    uint64_t pass_;
    int64_t rep_ = 0;
  };
  int64_t count_;
};

// ---- take, skip, shard

class TakeSkipShardNode final : public UnaryNode {
 public:
  enum class Kind { take, skip, shard };
  TakeSkipShardNode(std::shared_ptr<Node> in, Kind kind, int64_t a, int64_t b = 0)
      : UnaryNode(std::move(in)), kind_(kind), a_(a), b_(b) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = in_card();
    switch (kind_) {
      case Kind::take:
        if (a_ < 0) return c;
        return c == kInfiniteCardinality ? a_ : (c == kUnknownCardinality ? c : std::min(c, a_));
      case Kind::skip:
        if (c < 0) return c;
        return a_ < 0 ? 0 : std::max<int64_t>(0, c - a_);
      case Kind::shard:
        if (c < 0) return c;
        return c / a_ + (b_ < c % a_ ? 1 : 0);
    }
    return kUnknownCardinality;
  }
  const char* name() const { return kind_ == Kind::take ? "take" : kind_ == Kind::skip ? "skip" : "shard"; }
  std::string label() const override {
    return std::string(name()) + "(" + std::to_string(a_) + (kind_ == Kind::shard ? ", " + std::to_string(b_) : "") +
           ")";
  }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<TakeSkipShardNode>(std::move(in), kind_, a_, b_);
  }

 private:
  class It final : public UnaryIterator {
   public:
    It(const PassContext& c, const TakeSkipShardNode& n)
        : UnaryIterator(c, n.name(), *n.inputs[0], c.pass, true), n_(n) {}
    bool next_index(int64_t& index) override {
      return step([&] { return pull_index(index); });
    }

   protected:
    bool do_next(Element& out) override {
      return step([&] { return pull(out); });
    }

   private:
    template <typename Pull>
    bool step(Pull pull_one) {
      switch (n_.kind_) {
        case Kind::take:
          if (n_.a_ >= 0 && seen_ >= n_.a_) return false;
          ++seen_;
          return pull_one();
        case Kind::skip:
          while (n_.a_ < 0 || seen_ < n_.a_) {
            if (!pull_one()) return false;
            ++seen_;
          }
          return pull_one();
        case Kind::shard:
          // Keep elements whose position % num_shards == index.
          while (true) {
            if (!pull_one()) return false;
            if (seen_++ % n_.a_ == n_.b_) return true;
          }
      }
      return false;
    }
    const TakeSkipShardNode& n_;
    int64_t seen_ = 0;
  };
  Kind kind_;
  int64_t a_, b_;
};

}  // namespace

std::shared_ptr<Node> make_filter_node(std::shared_ptr<Node> in, std::function<bool(const Element&)> predicate) {
  return std::make_shared<FilterNode>(std::move(in), std::move(predicate));
}
std::shared_ptr<Node> make_shuffle_node(std::shared_ptr<Node> in, int64_t buffer, uint64_t seed, bool reshuffle) {
  return std::make_shared<ShuffleNode>(std::move(in), buffer, seed, reshuffle);
}
std::shared_ptr<Node> make_batch_node(std::shared_ptr<Node> in, int64_t batch, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(in), batch, drop_remainder);
}
std::shared_ptr<Node> make_unbatch_node(std::shared_ptr<Node> in) {
  return std::make_shared<UnbatchNode>(std::move(in));
}
std::shared_ptr<Node> make_repeat_node(std::shared_ptr<Node> in, int64_t count) {
  return std::make_shared<RepeatNode>(std::move(in), count);
}
std::shared_ptr<Node> make_take_node(std::shared_ptr<Node> in, int64_t count) {
  return std::make_shared<TakeSkipShardNode>(std::move(in), TakeSkipShardNode::Kind::take, count);
}
std::shared_ptr<Node> make_skip_node(std::shared_ptr<Node> in, int64_t count) {
  return std::make_shared<TakeSkipShardNode>(std::move(in), TakeSkipShardNode::Kind::skip, count);
}
std::shared_ptr<Node> make_shard_node(std::shared_ptr<Node> in, int64_t num_shards, int64_t index) {
  return std::make_shared<TakeSkipShardNode>(std::move(in), TakeSkipShardNode::Kind::shard, num_shards, index);
}

}  // namespace tk::data
