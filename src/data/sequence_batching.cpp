// padded_batch and bucket_by_sequence_length: batching elements of different lengths (tf.data's semantics).
#include <algorithm>
#include <deque>
#include <mutex>

#include "data/node.h"
#include "data/padding.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

// One input, pulled element by element (padding needs each element's own shape, so no random access).
class SingleInputIterator : public IteratorImpl {
 public:
  SingleInputIterator(const PassContext& ctx, std::string name, const Node& input)
      : IteratorImpl(ctx, std::move(name)) {
    in_ = input.make({ctx.pipeline, ctx.pass});
  }
  void cancel() override { in_->cancel(); }

 protected:
  bool pull(Element& e) {
    if (!in_->next(e)) return false;
    ++pulled_;
    return true;
  }
  std::unique_ptr<IteratorImpl> in_;
  int64_t pulled_ = 0;  // input elements taken so far (errors name them)
};

// ---- padded_batch

class PaddedBatchNode final : public UnaryNode {
 public:
  PaddedBatchNode(std::shared_ptr<Node> in, int64_t batch, PadSpec spec, bool drop)
      : UnaryNode(std::move(in)), batch_(batch), spec_(std::move(spec)), drop_(drop) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = in_card();
    if (c < 0) return c;
    return drop_ ? c / batch_ : (c + batch_ - 1) / batch_;
  }
  std::string label() const override {
    return "padded_batch(" + std::to_string(batch_) + (drop_ ? ", drop_remainder" : "") + ")";
  }
  Flow flow() const override { return {Flow::other, "padded_batch"}; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<PaddedBatchNode>(std::move(in), batch_, spec_, drop_);
  }

 private:
  class It final : public SingleInputIterator {
   public:
    It(const PassContext& c, const PaddedBatchNode& n)
        : SingleInputIterator(c, "padded_batch", *n.inputs[0]),
          n_(n),
          items_(static_cast<size_t>(n.batch_)),
          index_(static_cast<size_t>(n.batch_)) {}

   protected:
    bool do_next(Element& out) override {
      size_t k = 0;
      while (k < items_.size() && pull(items_[k])) index_[k++] = pulled_ - 1;
      if (k == 0 || (n_.drop_ && k < items_.size())) return false;
      pad_and_stack(items_, k, index_, n_.spec_, -1, out, "padded_batch");
      return true;
    }

   private:
    const PaddedBatchNode& n_;
    std::vector<Element> items_;
    std::vector<int64_t> index_;
  };
  int64_t batch_;
  PadSpec spec_;
  bool drop_;
};

// ---- bucket_by_sequence_length: group_by_window keyed by bucket, each window padded_batch'ed

class BucketNode final : public UnaryNode {
 public:
  BucketNode(std::shared_ptr<Node> in, BucketSpec spec) : UnaryNode(std::move(in)), spec_(std::move(spec)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  int64_t cardinality() const override {
    const int64_t c = in_card();
    return c == kInfiniteCardinality ? c : (c == 0 ? 0 : kUnknownCardinality);
  }
  std::string label() const override { return "bucket_by_sequence_length"; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<BucketNode>(std::move(in), spec_);
  }

  // tf.data's element_to_bucket_id: the bucket i with boundaries[i-1] <= length < boundaries[i].
  size_t bucket_of(int64_t length) const {
    const auto& b = spec_.boundaries;
    return static_cast<size_t>(std::upper_bound(b.begin(), b.end(), length) - b.begin());
  }

 private:
  struct Bucket {
    std::vector<Element> items;
    std::vector<int64_t> index;
  };
  class It final : public SingleInputIterator {
   public:
    It(const PassContext& c, const BucketNode& n)
        : SingleInputIterator(c, "bucket_by_sequence_length", *n.inputs[0]),
          n_(n),
          buckets_(n.spec_.batch_sizes.size()) {}

   protected:
    bool do_next(Element& out) override {
      const BucketSpec& s = n_.spec_;
      while (!done_) {
        Element e;
        if (!pull(e)) {
          done_ = true;
          break;
        }
        const int64_t length = s.length(e);
        const size_t b = n_.bucket_of(length);
        if (s.pad_to_bucket_boundary && b + 1 == buckets_.size())
          throw InvalidArgument(
              "bucket_by_sequence_length: input element " + std::to_string(pulled_ - 1) + " " + shapes_of(e) +
              " has length " + std::to_string(length) +
              "; when pad_to_bucket_boundary=True, elements must have length < max(bucket_boundaries) = " +
              std::to_string(s.boundaries.back()) + " (raise the last boundary or filter them out)");
        Bucket& bucket = buckets_[b];
        bucket.items.push_back(std::move(e));
        bucket.index.push_back(pulled_ - 1);
        if (static_cast<int64_t>(bucket.items.size()) == s.batch_sizes[b]) {
          emit(b, out);
          return true;
        }
      }
      // The end of the input: leftovers, in increasing bucket order (tf.data's group_by_window flushes its
      // windows by key); none when drop_remainder (they are all short).
      for (; flush_ < buckets_.size(); ++flush_)
        if (!buckets_[flush_].items.empty() && !s.drop_remainder) {
          emit(flush_++, out);
          return true;
        }
      return false;
    }

   private:
    void emit(size_t b, Element& out) {
      const BucketSpec& s = n_.spec_;
      Bucket& bucket = buckets_[b];
      const size_t n = bucket.items.size();
      if (s.no_padding)
        stack_elements(bucket.items, n, out, "bucket_by_sequence_length(no_padding=True)");
      else
        pad_and_stack(bucket.items, n, bucket.index, s.pad, s.pad_to_bucket_boundary ? s.boundaries[b] - 1 : -1, out,
                      "bucket_by_sequence_length");
      bucket.items.clear();
      bucket.index.clear();
    }
    const BucketNode& n_;
    std::vector<Bucket> buckets_;
    bool done_ = false;
    size_t flush_ = 0;
  };
  BucketSpec spec_;
};

}  // namespace

std::shared_ptr<Node> make_padded_batch_node(std::shared_ptr<Node> in, int64_t batch, PadSpec spec, bool drop) {
  return std::make_shared<PaddedBatchNode>(std::move(in), batch, std::move(spec), drop);
}
std::shared_ptr<Node> make_bucket_node(std::shared_ptr<Node> in, BucketSpec spec) {
  return std::make_shared<BucketNode>(std::move(in), std::move(spec));
}

}  // namespace tk::data
