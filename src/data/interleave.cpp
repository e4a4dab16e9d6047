// interleave(): cycle_length inner datasets open at once, block_length elements from each in turn (tf.data's
// order); with num_parallel_calls each open input is read ahead on its own thread (a prefetch per input).
#include <algorithm>
#include <mutex>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

class InterleaveNode final : public UnaryNode {
 public:
  InterleaveNode(std::shared_ptr<Node> in, std::function<Dataset(const Element&)> fn, InterleaveOptions o)
      : UnaryNode(std::move(in)), fn_(std::move(fn)), o_(o) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override { return in_card() == 0 ? 0 : kUnknownCardinality; }
  std::string label() const override {
    return "interleave(cycle_length=" + std::to_string(o_.cycle_length) + (o_.num_parallel_calls ? ", parallel" : "") +
           ")";
  }

 private:
  struct Open {
    Dataset dataset{nullptr};  // keeps the inner definition alive while it is read
    std::unique_ptr<IteratorImpl> it;
  };

  class It final : public IteratorImpl {
   public:
    It(const PassContext& ctx, const InterleaveNode& n) : IteratorImpl(ctx, "interleave"), n_(n), pass_(ctx.pass) {
      in_ = n.inputs[0]->make(ctx);
      const int64_t cycle = n.o_.cycle_length > 0 ? n.o_.cycle_length : pipeline_->cpu_budget;
      slots_.resize(static_cast<size_t>(cycle));
      counters_->parallelism = n.o_.num_parallel_calls ? static_cast<int>(cycle) : 1;
    }
    void cancel() override {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      in_->cancel();
      for (auto& s : slots_)
        if (s.it) s.it->cancel();
    }

   protected:
    bool do_next(Element& out) override {
      while (true) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (cancelled_) return false;  // do not open further inputs once cancelled
        }
        Open& s = slots_[cur_];
        if (!s.it && !open_next(s)) {  // an empty slot takes the next input at its turn
          if (std::none_of(slots_.begin(), slots_.end(), [](const Open& o) { return o.it != nullptr; })) return false;
          advance();
          continue;
        }
        if (s.it->next(out)) {
          if (++taken_ >= n_.o_.block_length) advance();
          return true;
        }
        close(s);  // exhausted: the next slot goes on, this one reopens at its next turn (tf.data's order)
        advance();
      }
    }

   private:
    void advance() {
      cur_ = (cur_ + 1) % slots_.size();
      taken_ = 0;
    }
    void close(Open& s) {
      std::unique_ptr<IteratorImpl> old;
      {
        std::lock_guard<std::mutex> lock(mu_);
        old = std::move(s.it);
      }
      old.reset();
      s.dataset = Dataset(nullptr);
    }
    bool open_next(Open& s) {
      Element e;
      if (in_done_ || !in_->next(e)) {
        in_done_ = true;
        return false;
      }
      Dataset d = n_.fn_(e);
      if (!d.node()) throw InvalidArgument("interleave: the function returned an empty Dataset");
      if (n_.o_.num_parallel_calls != 0) d = d.prefetch(std::max<int64_t>(2, n_.o_.block_length));
      std::unique_ptr<IteratorImpl> it = d.node()->make({pipeline_, mix_seed(pass_, opened_++)});
      std::lock_guard<std::mutex> lock(mu_);
      if (cancelled_) it->cancel();
      s.dataset = std::move(d);
      s.it = std::move(it);
      return true;
    }
    const InterleaveNode& n_;
    uint64_t pass_;
    std::unique_ptr<IteratorImpl> in_;
    std::vector<Open> slots_;
    size_t cur_ = 0;
    int64_t taken_ = 0;
    uint64_t opened_ = 0;
    bool in_done_ = false;
    std::mutex mu_;  // guards slot iterators against cancel() from another thread
    bool cancelled_ = false;
  };

  std::function<Dataset(const Element&)> fn_;
  InterleaveOptions o_;
};

}  // namespace

std::shared_ptr<Node> make_interleave_node(std::shared_ptr<Node> in, std::function<Dataset(const Element&)> fn,
                                           InterleaveOptions options) {
  return std::make_shared<InterleaveNode>(std::move(in), std::move(fn), options);
}

}  // namespace tk::data
