// One worker's share of a batched pipeline (auto_shard.h): the window-cutting stage and the rewrite that places it.
#include "data/auto_shard.h"

#include <stdexcept>
#include <vector>

#include "data/node.h"

namespace tk::data {
namespace {

// Reads the input in windows of `window` elements (the global batches) and yields this worker's rows of each, with
// the window's size pushed to `sizes` first. Over a random-access input it moves row indices, as shuffle does.
class WindowRowsNode final : public Node {
 public:
  WindowRowsNode(std::shared_ptr<Node> in, int64_t window, bool drop_remainder, RowsOf rows,
                 std::shared_ptr<GlobalBatchSizes> sizes)
      : window_(window), drop_(drop_remainder), rows_(std::move(rows)), sizes_(std::move(sizes)) {
    inputs = {std::move(in)};
  }
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = inputs[0]->cardinality();
    if (c < 0) return c;
    const int64_t rest = c % window_;
    return c / window_ * rows_(window_).count + (rest && !drop_ ? rows_(rest).count : 0);
  }
  std::string label() const override {
    const WorkerRows full = rows_(window_);
    return "rows [" + std::to_string(full.first) + ", " + std::to_string(full.first + full.count) + ") of every " +
           std::to_string(window_);
  }
  int64_t rows_per_batch() const { return rows_(window_).count; }

 private:
  class It final : public IteratorImpl {
   public:
    It(const PassContext& c, const WindowRowsNode& n) : IteratorImpl(c, "auto_shard"), n_(n) {
      in_ = n.inputs[0]->make(c);
      source_ = in_->indexed();
    }
    void cancel() override { in_->cancel(); }
    const RandomAccess* indexed() const override { return source_; }
    bool next_index(int64_t& index) override {
      if (!fill()) return false;
      index = indices_[kept_[next_++]];
      return true;
    }

   protected:
    bool do_next(Element& out) override {
      if (source_) {
        int64_t i = 0;
        if (!next_index(i)) return false;
        source_->get(i, out);
        return true;
      }
      if (!fill()) return false;
      out = std::move(items_[kept_[next_++]]);
      return true;
    }

   private:
    // The next window's rows of this worker, unless the current one still has some; false at the end.
    bool fill() {
      if (next_ < kept_.size()) return true;
      kept_.clear();
      next_ = 0;
      if (done_) return false;
      const auto w = static_cast<size_t>(n_.window_);
      size_t n = 0;
      if (source_) {
        indices_.resize(w);
        while (n < w && in_->next_index(indices_[n])) ++n;
      } else {
        items_.resize(w);
        while (n < w && in_->next(items_[n])) ++n;
      }
      if (n < w) done_ = true;
      if (n == 0 || (n < w && n_.drop_)) return false;
      const WorkerRows r = n_.rows_(static_cast<int64_t>(n));
      if (r.count < 1 || r.count > n_.rows_per_batch() || r.first < 0 || r.first + r.count > static_cast<int64_t>(n))
        throw std::logic_error("auto_shard: rows [" + std::to_string(r.first) + ", " +
                               std::to_string(r.first + r.count) + ") of a window of " + std::to_string(n) +
                               " do not fit the window or this worker's batch");
      for (int64_t k = 0; k < r.count; ++k) kept_.push_back(static_cast<size_t>(r.first + k));
      n_.sizes_->push(static_cast<int64_t>(n));
      return true;
    }
    const WindowRowsNode& n_;
    std::unique_ptr<IteratorImpl> in_;
    const RandomAccess* source_ = nullptr;
    std::vector<Element> items_;
    std::vector<int64_t> indices_;
    std::vector<size_t> kept_;  // positions in the window, in order
    size_t next_ = 0;
    bool done_ = false;
  };

  int64_t window_;
  bool drop_;
  RowsOf rows_;
  std::shared_ptr<GlobalBatchSizes> sizes_;
};

// Below the batch: past the elementwise stages (their work is then divided), the cut.
std::shared_ptr<Node> cut_below(const std::shared_ptr<Node>& node, const Flow& batch, const RowsOf& rows,
                                const std::shared_ptr<GlobalBatchSizes>& sizes) {
  if (node->flow().kind == Flow::elementwise)
    if (std::shared_ptr<Node> copy = node->with_input(cut_below(node->inputs[0], batch, rows, sizes))) return copy;
  return std::make_shared<WindowRowsNode>(node, batch.batch_size, batch.drop_remainder, rows, sizes);
}

// From the end of the pipeline down to its batch: stages that pass batches along one for one are copied.
std::shared_ptr<Node> rewrite(const std::shared_ptr<Node>& node, const RowsOf& rows,
                              const std::shared_ptr<GlobalBatchSizes>& sizes, std::string& why) {
  const Flow f = node->flow();
  if (f.kind == Flow::batch) {
    // Batches of this worker's rows of a full window; the cut already dropped a short last window if asked to.
    return make_batch_node(cut_below(node->inputs[0], f, rows, sizes), rows(f.batch_size).count, false);
  }
  if (node->inputs.empty()) {  // a source: its elements may be batches already (a generator's), not cut by batch()
    why = "the pipeline has no batch()";
    return nullptr;
  }
  if (f.kind != Flow::elementwise && f.kind != Flow::repeat) {
    why = "'" + f.why + "' comes after the last batch()";
    return nullptr;
  }
  std::shared_ptr<Node> in = rewrite(node->inputs[0], rows, sizes, why);
  return in ? node->with_input(std::move(in)) : nullptr;
}

}  // namespace

void GlobalBatchSizes::push(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  sizes_.push_back(n);
}

int64_t GlobalBatchSizes::pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sizes_.empty())
    throw std::logic_error(
        "auto_shard: a batch arrived without the size of its global batch (the rewritten pipeline "
        "and fit went out of step)");
  const int64_t n = sizes_.front();
  sizes_.pop_front();
  return n;
}

void GlobalBatchSizes::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  sizes_.clear();
}

std::optional<WorkerShare> share_of_batches(const Dataset& d, const RowsOf& rows, std::string& why) {
  auto sizes = std::make_shared<GlobalBatchSizes>();
  std::shared_ptr<Node> node = rewrite(d.node(), rows, sizes, why);
  if (!node) return std::nullopt;
  return WorkerShare{Dataset(std::move(node)), std::move(sizes)};
}

}  // namespace tk::data
