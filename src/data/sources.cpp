// Sources: tensor slices (host or device), range, generators, file readers, zip.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/device_bytes.h"
#include "data/device_batches.h"
#include "data/node.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk::data {
namespace {

std::atomic<uint64_t> g_rows_copied_back{0};

// ---- slices: rows of arrays, with random access

// Rows of arrays in the memory of a device the host cannot address (on_device(cuda:N)) reach a pass that needs their
// values (iterating by hand, map) as host tensors, each row copied back (synchronously: for inspection, not speed).
// fit / evaluate / predict never take this path: they run the pipeline on row indices (device_batches.h).
void copy_rows_back(const Tensor& a, const int64_t* idx, int64_t n, Tensor& out) {
  g_rows_copied_back.fetch_add(static_cast<uint64_t>(std::max<int64_t>(n, 0)), std::memory_order_relaxed);
  const size_t row = n > 0 ? out.nbytes() / static_cast<size_t>(n) : 0;
  for (int64_t i = 0; i < n && row; ++i)
    device_copy(static_cast<char*>(out.raw()) + static_cast<size_t>(i) * row, Device::cpu(),
                static_cast<const char*>(a.raw()) + static_cast<size_t>(idx[i]) * row, a.device(), row);
}

class Slices final : public RandomAccess {
 public:
  explicit Slices(std::vector<Tensor> arrays) : arrays_(std::move(arrays)) {}
  int64_t size() const override { return arrays_.empty() ? 0 : arrays_[0].dim(0); }
  const std::vector<Tensor>& arrays() const { return arrays_; }
  void gather(const int64_t* idx, int64_t n, Element& out) const override {
    out.resize(arrays_.size());
    for (size_t c = 0; c < arrays_.size(); ++c) {
      const Tensor& a = arrays_[c];
      if (!a.on_host()) {  // (n, ...) on the host <- rows idx[0..n) of (size, ...) on the device
        out[c] = Tensor(a.shape().with_batch(n), a.dtype(), Device::cpu(), "dataset/batch");
        copy_rows_back(a, idx, n, out[c]);
        continue;
      }
      Tensor t(a.shape().with_batch(n), a.dtype(), a.device(), "dataset/batch");
      const size_t row = n > 0 ? t.nbytes() / static_cast<size_t>(n) : 0;
      const auto* src = static_cast<const char*>(a.raw());
      auto* dst = static_cast<char*>(t.raw());
      // (n, ...) <- rows idx[0..n) of (size, ...)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + static_cast<size_t>(i) * row, src + static_cast<size_t>(idx[i]) * row, row);
      out[c] = std::move(t);
    }
  }
  void get(int64_t i, Element& out) const override {
    out.resize(arrays_.size());
    for (size_t c = 0; c < arrays_.size(); ++c) {
      const Tensor& a = arrays_[c];
      std::vector<int64_t> dims(a.shape().dims().begin() + 1, a.shape().dims().end());
      Tensor t{Shape(dims), a.dtype(), a.on_host() ? a.device() : Device::cpu(), "dataset/element"};
      const size_t row = t.nbytes();
      if (!a.on_host())
        copy_rows_back(a, &i, 1, t);
      else if (row)
        std::memcpy(t.raw(), static_cast<const char*>(a.raw()) + static_cast<size_t>(i) * row, row);
      out[c] = std::move(t);
    }
  }

 private:
  std::vector<Tensor> arrays_;
};

// Yields rows 0..size-1 of a random-access source, as elements or as indices.
class IndexedSourceIterator final : public IteratorImpl {
 public:
  IndexedSourceIterator(const PassContext& ctx, std::string name, std::shared_ptr<const RandomAccess> source)
      : IteratorImpl(ctx, std::move(name)), source_(std::move(source)) {}
  const RandomAccess* indexed() const override { return source_.get(); }
  bool next_index(int64_t& index) override {
    if (next_ >= source_->size()) return false;
    index = next_++;
    return true;
  }

 protected:
  bool do_next(Element& out) override {
    if (next_ >= source_->size()) return false;
    source_->get(next_++, out);
    return true;
  }

 private:
  std::shared_ptr<const RandomAccess> source_;
  int64_t next_ = 0;
};

class SlicesNode final : public Node {
 public:
  SlicesNode(std::shared_ptr<const RandomAccess> source, std::string name, const std::vector<Tensor>* arrays = nullptr)
      : source_(std::move(source)), name_(std::move(name)), arrays_(arrays) {}
  const std::vector<Tensor>* source_arrays() const override { return arrays_; }
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    return std::make_unique<IndexedSourceIterator>(ctx, name_, source_);
  }
  int64_t cardinality() const override { return source_->size(); }
  std::string label() const override { return name_; }

 private:
  std::shared_ptr<const RandomAccess> source_;
  std::string name_;
  const std::vector<Tensor>* arrays_;  // source_'s, when it is Slices
};

std::shared_ptr<Node> slices_node(std::vector<Tensor> arrays, std::string name) {
  auto slices = std::make_shared<Slices>(std::move(arrays));
  const std::vector<Tensor>* held = &slices->arrays();
  return std::make_shared<SlicesNode>(std::move(slices), std::move(name), held);
}

void check_slices(const std::vector<Tensor>& arrays, const char* what) {
  if (arrays.empty()) throw InvalidArgument(std::string(what) + ": no arrays given");
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (!arrays[i].defined() || arrays[i].shape().rank() == 0)
      throw InvalidArgument(std::string(what) + ": array " + std::to_string(i) +
                            " is undefined or a scalar; slicing needs at least one dimension");
    if (arrays[i].dim(0) != arrays[0].dim(0))
      throw InvalidArgument(std::string(what) + ": array " + std::to_string(i) + " has " +
                            std::to_string(arrays[i].dim(0)) + " rows but array 0 has " +
                            std::to_string(arrays[0].dim(0)) + " (all arrays must have the same dimension 0)");
  }
}

// ---- range

class Range final : public RandomAccess {
 public:
  Range(int64_t start, int64_t stop, int64_t step) : start_(start), step_(step) {
    const int64_t span = step > 0 ? stop - start : start - stop;
    const int64_t s = step > 0 ? step : -step;
    size_ = span <= 0 ? 0 : (span + s - 1) / s;
  }
  int64_t size() const override { return size_; }
  void gather(const int64_t* idx, int64_t n, Element& out) const override {
    Tensor t(Shape({n}), DType::i64, Device::cpu(), "dataset/batch");
    auto* p = static_cast<int64_t*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = start_ + idx[i] * step_;
    out.assign(1, std::move(t));
  }
  void get(int64_t i, Element& out) const override {
    Tensor t(Shape(std::vector<int64_t>{}), DType::i64, Device::cpu(), "dataset/element");
    *static_cast<int64_t*>(t.raw()) = start_ + i * step_;
    out.assign(1, std::move(t));
  }

 private:
  int64_t start_, step_, size_ = 0;
};

// ---- generator and reader

class GeneratorIterator final : public IteratorImpl {
 public:
  GeneratorIterator(const PassContext& ctx, std::string name, Dataset::Generator gen)
      : IteratorImpl(ctx, std::move(name)), gen_(std::move(gen)) {}

 protected:
  bool do_next(Element& out) override { return gen_ && gen_(out); }

 private:
  Dataset::Generator gen_;
};

class GeneratorNode final : public Node {
 public:
  GeneratorNode(std::function<Dataset::Generator()> make, std::string name)
      : make_(std::move(make)), name_(std::move(name)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    return std::make_unique<GeneratorIterator>(ctx, name_, make_());
  }
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::string label() const override { return name_; }

 private:
  std::function<Dataset::Generator()> make_;
  std::string name_;
};

class ReaderIterator final : public IteratorImpl {
 public:
  ReaderIterator(const PassContext& ctx, std::string name, std::unique_ptr<ElementReader> reader)
      : IteratorImpl(ctx, std::move(name)), reader_(std::move(reader)) {}

 protected:
  bool do_next(Element& out) override { return reader_->next(out); }

 private:
  std::unique_ptr<ElementReader> reader_;
};

class ReaderNode final : public Node {
 public:
  ReaderNode(std::function<std::unique_ptr<ElementReader>()> open, std::string name)
      : open_(std::move(open)), name_(std::move(name)) {}
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    std::unique_ptr<ElementReader> r = open_();
    if (!r) throw InvalidArgument("Dataset::from_reader(" + name_ + "): the open function returned no reader");
    return std::make_unique<ReaderIterator>(ctx, name_, std::move(r));
  }
  int64_t cardinality() const override { return kUnknownCardinality; }
  std::string label() const override { return name_; }

 private:
  std::function<std::unique_ptr<ElementReader>()> open_;
  std::string name_;
};

// ---- zip

class ZipIterator final : public IteratorImpl {
 public:
  ZipIterator(const PassContext& ctx, const std::vector<std::shared_ptr<Node>>& inputs) : IteratorImpl(ctx, "zip") {
    // The same pass number for every input: two inputs shuffled with the same seed stay aligned (tf.data's
    // features/labels idiom).
    for (const auto& in : inputs) ins_.push_back(in->make(ctx));
  }
  void cancel() override {
    for (auto& in : ins_) in->cancel();
  }

 protected:
  bool do_next(Element& out) override {
    out.clear();
    for (auto& in : ins_) {
      if (!in->next(part_)) return false;
      for (Tensor& t : part_) out.push_back(std::move(t));
    }
    return true;
  }

 private:
  std::vector<std::unique_ptr<IteratorImpl>> ins_;
  Element part_;
};

class ZipNode final : public Node {
 public:
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override {
    return std::make_unique<ZipIterator>(ctx, inputs);
  }
  int64_t cardinality() const override {
    int64_t c = kInfiniteCardinality;
    for (const auto& in : inputs) {
      const int64_t k = in->cardinality();
      if (k == kUnknownCardinality) return kUnknownCardinality;
      if (k >= 0) c = c < 0 ? k : std::min(c, k);
    }
    return c;
  }
  std::string label() const override { return "zip(" + std::to_string(inputs.size()) + ")"; }
};

}  // namespace

uint64_t rows_copied_back() { return g_rows_copied_back.load(std::memory_order_relaxed); }

std::shared_ptr<Node> make_slices_node(std::vector<Tensor> arrays, std::string name) {
  check_slices(arrays, "Dataset::from_tensor_slices");
  return slices_node(std::move(arrays), std::move(name));
}

std::shared_ptr<Node> make_range_node(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<SlicesNode>(std::make_shared<Range>(start, stop, step),
                                      "range(" + std::to_string(start) + ", " + std::to_string(stop) + ")");
}

std::shared_ptr<Node> make_generator_node(std::function<Dataset::Generator()> make, std::string name) {
  return std::make_shared<GeneratorNode>(std::move(make), std::move(name));
}

std::shared_ptr<Node> make_reader_node(std::function<std::unique_ptr<ElementReader>()> open, std::string name) {
  return std::make_shared<ReaderNode>(std::move(open), std::move(name));
}

std::shared_ptr<Node> make_zip_node(std::vector<std::shared_ptr<Node>> inputs) {
  auto n = std::make_shared<ZipNode>();
  n->inputs = std::move(inputs);
  return n;
}

Dataset Dataset::on_device(const std::vector<Tensor>& arrays, Device device) {
  check_slices(arrays, "Dataset::on_device");
  size_t total = 0;
  for (const Tensor& a : arrays) total += (a.nbytes() + 255) / 256 * 256;
  std::vector<Tensor> copies;
  try {
    for (size_t i = 0; i < arrays.size(); ++i) {
      Tensor t(arrays[i].shape(), arrays[i].dtype(), device, "dataset/on_device[" + std::to_string(i) + "]");
      if (t.nbytes()) device_copy(t.raw(), device, arrays[i].raw(), arrays[i].device(), t.nbytes());
      copies.push_back(std::move(t));
    }
  } catch (const OutOfMemoryError& e) {
    const MemoryInfo m = config::get_memory_info(device);
    throw OutOfMemoryError("Dataset::on_device: the arrays need " + config::format_bytes(total) + " but " +
                           device.to_string() + " has " + config::format_bytes(m.limit - std::min(m.limit, m.current)) +
                           " of its " + config::format_bytes(m.limit) +
                           " budget free (keep the data on the host with from_tensor_slices + prefetch, or raise "
                           "the budget: TK_MEMORY_LIMIT / tk::config::set_memory_limit)\n" +
                           e.what());
  }
  return Dataset(slices_node(std::move(copies), "on_device(" + device.to_string() + ")"));
}

}  // namespace tk::data
