// window: sliding windows over the input, each yielded as one element of stacked components (tf.data's
// window(size, shift, stride, drop_remainder).flat_map(lambda *w: zip(c.batch(size) for c in w))).
#include <deque>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

class WindowNode final : public UnaryNode {
 public:
  WindowNode(std::shared_ptr<Node> in, int64_t size, int64_t shift, int64_t stride, bool drop)
      : UnaryNode(std::move(in)), size_(size), shift_(shift), stride_(stride), drop_(drop) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return std::make_unique<It>(ctx, *this); }
  // Window k starts at input position k * shift; a full one spans (size - 1) * stride + 1 positions.
  int64_t cardinality() const override {
    const int64_t n = in_card();
    if (n < 0) return n;
    if (!drop_) return (n + shift_ - 1) / shift_;
    const int64_t span = (size_ - 1) * stride_ + 1;
    return n < span ? 0 : (n - span) / shift_ + 1;
  }
  std::string label() const override {
    return "window(" + std::to_string(size_) + ", shift=" + std::to_string(shift_) +
           ", stride=" + std::to_string(stride_) + (drop_ ? ", drop_remainder" : "") + ")";
  }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<WindowNode>(std::move(in), size_, shift_, stride_, drop_);
  }

 private:
  class It final : public IteratorImpl {
   public:
    It(const PassContext& c, const WindowNode& n) : IteratorImpl(c, "window"), n_(n) {
      in_ = n.inputs[0]->make({c.pipeline, c.pass});
    }
    void cancel() override { in_->cancel(); }

   protected:
    bool do_next(Element& out) override {
      const int64_t span = (n_.size_ - 1) * n_.stride_ + 1;
      // Drop what lies before this window's start (also input elements not yet read, when shift > span).
      while (buffer_start_ < start_) {
        if (!buffer_.empty()) {
          buffer_.pop_front();
        } else {
          Element skipped;
          if (ended_ || !in_->next(skipped)) {
            ended_ = true;
            return false;
          }
        }
        ++buffer_start_;
      }
      while (!ended_ && static_cast<int64_t>(buffer_.size()) < span) {
        Element e;
        if (!in_->next(e)) {
          ended_ = true;
          break;
        }
        buffer_.push_back(std::move(e));
      }
      if (buffer_.empty()) return false;
      if (static_cast<int64_t>(buffer_.size()) < span && n_.drop_) return false;
      items_.clear();
      for (int64_t j = 0; j < n_.size_ && j * n_.stride_ < static_cast<int64_t>(buffer_.size()); ++j)
        items_.push_back(buffer_[static_cast<size_t>(j * n_.stride_)]);
      stack_elements(items_, items_.size(), out, "window");
      start_ += n_.shift_;
      return true;
    }

   private:
    const WindowNode& n_;
    std::unique_ptr<IteratorImpl> in_;
    std::deque<Element> buffer_;  // input elements from position buffer_start_ on
    std::vector<Element> items_;
    int64_t buffer_start_ = 0;
    int64_t start_ = 0;  // the next window's first input position
    bool ended_ = false;
  };
  int64_t size_, shift_, stride_;
  bool drop_;
};

}  // namespace

std::shared_ptr<Node> make_window_node(std::shared_ptr<Node> in, int64_t size, int64_t shift, int64_t stride,
                                       bool drop_remainder) {
  return std::make_shared<WindowNode>(std::move(in), size, shift, stride, drop_remainder);
}

}  // namespace tk::data
