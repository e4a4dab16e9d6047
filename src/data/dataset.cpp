// Dataset's public methods, Iterator, and what every stage shares (timing, seeds, budgets).
#include "trainkit/data/dataset.h"

#include <glob.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "data/node.h"
#include "data/padding.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

std::atomic<uint64_t> g_global_seed{0};
std::atomic<uint64_t> g_seed_counter{0};

// Time spent in nested stages' next() on this thread, so each stage counts only its own time.
thread_local int64_t tl_nested_ns = 0;

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

// The user-facing end of a pass: measures the consumer's time between calls (AUTOTUNE's target rate).
class RootIterator final : public IteratorImpl {
 public:
  RootIterator(const PassContext& ctx, std::shared_ptr<Node> definition, std::unique_ptr<IteratorImpl> in)
      : IteratorImpl(ctx, "consumer"), definition_(std::move(definition)), in_(std::move(in)) {}
  ~RootIterator() override { in_->cancel(); }
  void cancel() override { in_->cancel(); }

 protected:
  bool do_next(Element& out) override {
    const int64_t t = now_ns();
    if (last_return_ns_ != 0) pipeline_->root_away_ns.fetch_add(t - last_return_ns_, std::memory_order_relaxed);
    const bool ok = in_->next(out);
    last_return_ns_ = now_ns();
    if (ok) pipeline_->root_elements.fetch_add(1, std::memory_order_relaxed);
    return ok;
  }

 private:
  std::shared_ptr<Node> definition_;  // stages refer to their nodes: keep the definition alive
  std::unique_ptr<IteratorImpl> in_;
  int64_t last_return_ns_ = 0;
};

// The pipeline's options, merged: for each field the outermost with_options that sets it.
void merge_options(const Node& node, Options& out) {
  if (node.options) {
    if (out.ram_budget == 0) out.ram_budget = node.options->ram_budget;
    if (out.cpu_budget == 0) out.cpu_budget = node.options->cpu_budget;
    if (out.auto_shard_policy == AutoShardPolicy::AUTO) out.auto_shard_policy = node.options->auto_shard_policy;
  }
  for (const auto& in : node.inputs) merge_options(*in, out);
}

}  // namespace

// ---- shared internals

Options pipeline_options(const Node& node) {
  Options o;
  merge_options(node, o);
  return o;
}

uint64_t resolve_seed(uint64_t seed) {
  if (seed != 0) return seed;
  const uint64_t global = g_global_seed.load();
  if (global != 0) return mix_seed(global, g_seed_counter.fetch_add(1));
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void set_global_seed(uint64_t seed) {
  g_global_seed.store(seed);
  g_seed_counter.store(0);
}

std::shared_ptr<StageCounters> Pipeline::add_stage(std::string name, std::string kind) {
  std::lock_guard<std::mutex> lock(stages_mu);
  for (const auto& c : stages)
    if (!c->live && c->name == name && c->kind == kind) {
      c->live = true;
      return c;
    }
  auto c = std::make_shared<StageCounters>();
  c->name = std::move(name);
  c->kind = std::move(kind);
  stages.push_back(c);
  return c;
}

IteratorImpl::IteratorImpl(const PassContext& ctx, std::string name, std::string kind) : pipeline_(ctx.pipeline) {
  std::string k = kind.empty() ? name : std::move(kind);
  counters_ = ctx.pipeline->add_stage(std::move(name), std::move(k));
}

bool IteratorImpl::next(Element& out) {
  const int64_t saved = tl_nested_ns;
  tl_nested_ns = 0;
  const int64_t t0 = now_ns();
  bool ok = false;
  try {
    ok = do_next(out);
  } catch (...) {
    tl_nested_ns = saved + (now_ns() - t0);
    throw;
  }
  const int64_t total = now_ns() - t0;
  const int64_t own = total - tl_nested_ns;
  (async_ ? counters_->wait_ns : counters_->work_ns).fetch_add(own, std::memory_order_relaxed);
  if (ok) counters_->elements.fetch_add(1, std::memory_order_relaxed);
  tl_nested_ns = saved + total;
  return ok;
}

bool IteratorImpl::next_index(int64_t&) {
  throw std::logic_error("tk::data: next_index called on a stage without random access");
}

int64_t element_bytes(const Element& e) {
  int64_t b = 0;
  for (const Tensor& t : e) b += static_cast<int64_t>(t.nbytes());
  return b;
}

std::string shapes_of(const Element& e) {
  std::string s = "(";
  for (size_t i = 0; i < e.size(); ++i)
    s += (i ? ", " : "") + std::string(dtype_name(e[i].dtype())) + e[i].shape().to_string();
  return s + ")";
}

void stack_elements(const std::vector<Element>& items, size_t n, Element& out, const char* stage) {
  const Element& first = items[0];
  out.resize(first.size());
  for (size_t c = 0; c < first.size(); ++c) {
    std::vector<int64_t> dims{static_cast<int64_t>(n)};
    for (int d = 0; d < first[c].shape().rank(); ++d) dims.push_back(first[c].dim(d));
    Tensor t(Shape(dims), first[c].dtype(), first[c].device(), "dataset/batch");
    const size_t row = first[c].nbytes();
    auto* dst = static_cast<char*>(t.raw());
    for (size_t i = 0; i < n; ++i) {
      const Element& e = items[i];
      if (e.size() != first.size() || e[c].shape() != first[c].shape() || e[c].dtype() != first[c].dtype())
        throw InvalidArgument(std::string(stage) + ": element " + std::to_string(i) + " of the batch is " +
                              shapes_of(e) + " but element 0 is " + shapes_of(first) +
                              "; batch needs equal shapes (map the elements to one shape first)");
      if (row) std::memcpy(dst + i * row, e[c].raw(), row);
    }
    out[c] = std::move(t);
  }
}

size_t default_ram_budget() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024 / 2;
    meminfo.ignore(64, '\n');
  }
  return size_t{1} << 30;
}

std::vector<std::string> list_files(const std::string& pattern, bool shuffle, uint64_t seed) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (files.empty())
    throw InvalidArgument("list_files: no file matches '" + pattern +
                          "' (check the directory and the glob: *, ? and [...] are supported)");
  std::sort(files.begin(), files.end());
  if (shuffle) {
    Rng rng(resolve_seed(seed));
    std::shuffle(files.begin(), files.end(), rng);
  }
  return files;
}

// ---- Iterator

Iterator::Iterator() = default;
Iterator::Iterator(std::unique_ptr<IteratorImpl> impl) : impl_(std::move(impl)) {}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;
Iterator::~Iterator() = default;

bool Iterator::next(Element& out) {
  if (!impl_) throw InvalidArgument("Iterator::next: this iterator is empty (get one from Dataset::iterator())");
  return impl_->next(out);
}

std::vector<StageStats> Iterator::stats() const {
  std::vector<StageStats> out;
  if (!impl_) return out;
  const auto& p = impl_->pipeline();
  std::lock_guard<std::mutex> lock(p->stages_mu);
  // Stages register downstream first (each creates its input in its constructor's body); report source first.
  for (auto it = p->stages.rbegin(); it != p->stages.rend(); ++it) {
    const StageCounters& c = **it;
    if (c.name == "consumer") continue;
    StageStats s;
    s.name = c.name;
    s.elements = c.elements.load();
    s.work_seconds = static_cast<double>(c.work_ns.load()) * 1e-9;
    s.wait_seconds = static_cast<double>(c.wait_ns.load()) * 1e-9;
    s.parallelism = c.parallelism.load();
    s.buffer_limit = c.buffer_limit.load();
    s.buffered_bytes = c.buffered_bytes.load();
    s.autotuned = c.autotuned.load();
    s.kind = c.kind;
    out.push_back(std::move(s));
  }
  return out;
}

int64_t Iterator::buffered_bytes() const { return impl_ ? impl_->pipeline()->buffered_bytes.load() : 0; }

// ---- Dataset

Dataset Dataset::from_tensor_slices(std::vector<Tensor> arrays) {
  return Dataset(make_slices_node(std::move(arrays), "from_tensor_slices"));
}
Dataset Dataset::range(int64_t stop) { return range(0, stop, 1); }
Dataset Dataset::range(int64_t start, int64_t stop, int64_t step) {
  require(step != 0, "Dataset::range: step must not be 0");
  return Dataset(make_range_node(start, stop, step));
}
Dataset Dataset::from_generator(std::function<Generator()> make, std::string name) {
  require(static_cast<bool>(make), "Dataset::from_generator: the generator factory is empty");
  return Dataset(make_generator_node(std::move(make), std::move(name)));
}
Dataset Dataset::from_reader(std::function<std::unique_ptr<ElementReader>()> open, std::string name) {
  require(static_cast<bool>(open), "Dataset::from_reader: the open function is empty");
  return Dataset(make_reader_node(std::move(open), std::move(name)));
}
Dataset Dataset::from_files(std::vector<std::string> files, std::function<Dataset(const std::string&)> open,
                            InterleaveOptions options) {
  require(!files.empty(), "Dataset::from_files: the file list is empty");
  require(static_cast<bool>(open), "Dataset::from_files: the open function is empty");
  auto shared = std::make_shared<std::vector<std::string>>(std::move(files));
  const auto n = static_cast<int64_t>(shared->size());
  return range(n).interleave(
      [shared, open](const Element& e) {
        return open((*shared)[static_cast<size_t>(*static_cast<const int64_t*>(e[0].raw()))]);
      },
      options);
}
Dataset Dataset::zip(const std::vector<Dataset>& datasets) {
  require(!datasets.empty(), "Dataset::zip: no datasets given");
  std::vector<std::shared_ptr<Node>> nodes;
  for (const Dataset& d : datasets) nodes.push_back(d.node_);
  return Dataset(make_zip_node(std::move(nodes)));
}

Dataset Dataset::map(std::function<Element(Element)> fn, MapOptions options) const {
  require(static_cast<bool>(fn), "Dataset::map: the function is empty");
  return Dataset(make_map_node(
      node_, [f = std::move(fn)](Element e, Rng&) { return f(std::move(e)); }, false, std::move(options)));
}
Dataset Dataset::map(std::function<Element(Element, Rng&)> fn, MapOptions options) const {
  require(static_cast<bool>(fn), "Dataset::map: the function is empty");
  return Dataset(make_map_node(node_, std::move(fn), true, std::move(options)));
}
Dataset Dataset::filter(std::function<bool(const Element&)> predicate) const {
  require(static_cast<bool>(predicate), "Dataset::filter: the predicate is empty");
  return Dataset(make_filter_node(node_, std::move(predicate)));
}
Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  require(buffer_size > 0, "Dataset::shuffle: buffer_size must be positive, got " + std::to_string(buffer_size));
  return Dataset(make_shuffle_node(node_, buffer_size, resolve_seed(seed), reshuffle_each_iteration));
}
Dataset Dataset::batch(int64_t batch_size, bool drop_remainder) const {
  require(batch_size > 0, "Dataset::batch: batch_size must be positive, got " + std::to_string(batch_size));
  return Dataset(make_batch_node(node_, batch_size, drop_remainder));
}
Dataset Dataset::padded_batch(int64_t batch_size, PaddedShapes padded_shapes, std::vector<double> padding_values,
                              bool drop_remainder) const {
  require(batch_size > 0, "Dataset::padded_batch: batch_size must be positive, got " + std::to_string(batch_size));
  PadSpec spec{std::move(padded_shapes), std::move(padding_values)};
  check_pad_spec(spec, "Dataset::padded_batch");
  return Dataset(make_padded_batch_node(node_, batch_size, std::move(spec), drop_remainder));
}
Dataset Dataset::bucket_by_sequence_length(std::function<int64_t(const Element&)> element_length_func,
                                           std::vector<int64_t> bucket_boundaries,
                                           std::vector<int64_t> bucket_batch_sizes, PaddedShapes padded_shapes,
                                           std::vector<double> padding_values, bool pad_to_bucket_boundary,
                                           bool no_padding, bool drop_remainder) const {
  const std::string op = "Dataset::bucket_by_sequence_length";
  require(static_cast<bool>(element_length_func), op + ": element_length_func is empty");
  require(bucket_batch_sizes.size() == bucket_boundaries.size() + 1,
          op + ": len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1, got len(bucket_batch_sizes)=" +
              std::to_string(bucket_batch_sizes.size()) +
              " and len(bucket_boundaries)=" + std::to_string(bucket_boundaries.size()));
  for (size_t i = 0; i < bucket_batch_sizes.size(); ++i)
    require(bucket_batch_sizes[i] > 0, op + ": bucket_batch_sizes[" + std::to_string(i) + "] must be positive, got " +
                                           std::to_string(bucket_batch_sizes[i]));
  for (size_t i = 1; i < bucket_boundaries.size(); ++i)
    require(bucket_boundaries[i - 1] < bucket_boundaries[i],
            op + ": bucket_boundaries must be strictly increasing, but [" + std::to_string(i - 1) +
                "] = " + std::to_string(bucket_boundaries[i - 1]) + " >= [" + std::to_string(i) +
                "] = " + std::to_string(bucket_boundaries[i]));
  if (pad_to_bucket_boundary) {
    require(!no_padding, op + ": pad_to_bucket_boundary and no_padding exclude each other");
    require(!bucket_boundaries.empty(), op + ": pad_to_bucket_boundary needs at least one bucket boundary");
    require(bucket_boundaries.front() >= 1,
            op + ": pad_to_bucket_boundary pads to boundary - 1, so boundaries must be >= 1, got " +
                std::to_string(bucket_boundaries.front()));
    require(!padded_shapes.empty(), op + ": pad_to_bucket_boundary needs padded_shapes, with -1 in the sequence "
                                         "dimensions (they are padded to the bucket's boundary - 1), e.g. {{-1}, {}}");
  }
  BucketSpec spec;
  spec.length = std::move(element_length_func);
  spec.boundaries = std::move(bucket_boundaries);
  spec.batch_sizes = std::move(bucket_batch_sizes);
  spec.pad = {std::move(padded_shapes), std::move(padding_values)};
  spec.pad_to_bucket_boundary = pad_to_bucket_boundary;
  spec.no_padding = no_padding;
  spec.drop_remainder = drop_remainder;
  check_pad_spec(spec.pad, op);
  return Dataset(make_bucket_node(node_, std::move(spec)));
}
Dataset Dataset::window(int64_t size, int64_t shift, int64_t stride, bool drop_remainder) const {
  require(size > 0, "Dataset::window: size must be positive, got " + std::to_string(size));
  require(shift >= 0, "Dataset::window: shift must be positive (0: size), got " + std::to_string(shift));
  require(stride > 0, "Dataset::window: stride must be positive, got " + std::to_string(stride));
  return Dataset(make_window_node(node_, size, shift == 0 ? size : shift, stride, drop_remainder));
}
Dataset Dataset::unbatch() const { return Dataset(make_unbatch_node(node_)); }
Dataset Dataset::repeat(int64_t count) const {
  require(count >= -1, "Dataset::repeat: count must be -1 (forever) or >= 0, got " + std::to_string(count));
  return Dataset(make_repeat_node(node_, count));
}
Dataset Dataset::take(int64_t count) const {
  require(count >= -1, "Dataset::take: count must be -1 (all) or >= 0, got " + std::to_string(count));
  return Dataset(make_take_node(node_, count));
}
Dataset Dataset::skip(int64_t count) const {
  require(count >= -1, "Dataset::skip: count must be -1 (all) or >= 0, got " + std::to_string(count));
  return Dataset(make_skip_node(node_, count));
}
Dataset Dataset::cache(const std::string& filename) const { return Dataset(make_cache_node(node_, filename)); }
Dataset Dataset::prefetch(int64_t buffer_size) const {
  require(buffer_size > 0 || buffer_size == AUTOTUNE,
          "Dataset::prefetch: buffer_size must be positive or AUTOTUNE, got " + std::to_string(buffer_size));
  return Dataset(make_prefetch_node(node_, buffer_size));
}
Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  require(num_shards > 0 && index >= 0 && index < num_shards,
          "Dataset::shard: need num_shards > 0 and 0 <= index < num_shards, got num_shards=" +
              std::to_string(num_shards) + " index=" + std::to_string(index));
  return Dataset(make_shard_node(node_, num_shards, index));
}
Dataset Dataset::interleave(std::function<Dataset(const Element&)> fn, InterleaveOptions options) const {
  require(static_cast<bool>(fn), "Dataset::interleave: the function is empty");
  require(options.cycle_length >= 0 || options.cycle_length == AUTOTUNE,
          "Dataset::interleave: cycle_length must be >= 0 (0: cpu count)");
  require(options.block_length > 0, "Dataset::interleave: block_length must be positive");
  require(options.num_parallel_calls >= 0 || options.num_parallel_calls == AUTOTUNE,
          "Dataset::interleave: num_parallel_calls must be >= 0 or AUTOTUNE");
  return Dataset(make_interleave_node(node_, std::move(fn), options));
}

namespace {
class OptionsNode final : public UnaryNode {
 public:
  OptionsNode(std::shared_ptr<Node> in, std::optional<Options> o) : UnaryNode(std::move(in)) { options = o; }
  std::unique_ptr<IteratorImpl> make(const PassContext& ctx) const override { return inputs[0]->make(ctx); }
  int64_t cardinality() const override { return in_card(); }
  std::string label() const override { return {}; }
  Flow flow() const override { return {Flow::elementwise}; }
  bool moves_rows() const override { return true; }
  std::shared_ptr<Node> with_input(std::shared_ptr<Node> in) const override {
    return std::make_shared<OptionsNode>(std::move(in), options);
  }
};
}  // namespace

Dataset Dataset::with_options(Options options) const {
  require(options.cpu_budget >= 0, "Dataset::with_options: cpu_budget must be >= 0 (0: all cores)");
  return Dataset(std::make_shared<OptionsNode>(node_, options));
}

int64_t Dataset::cardinality() const { return node_->cardinality(); }

std::string Dataset::describe() const {
  std::vector<std::string> parts;
  for (const Node* n = node_.get(); n; n = n->inputs.empty() ? nullptr : n->inputs[0].get()) {
    std::string l = n->label();
    if (!l.empty()) parts.push_back(std::move(l));
  }
  std::string s;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) s += (s.empty() ? "" : " -> ") + *it;
  return s;
}

Iterator Dataset::iterator() const { return make_iterator(*this, node_->passes.fetch_add(1)); }

Iterator make_iterator(const Dataset& d, uint64_t pass) {
  const std::shared_ptr<Node>& node_ = d.node();
  auto pipeline = std::make_shared<Pipeline>();
  const Options o = pipeline_options(*node_);
  pipeline->ram_budget = o.ram_budget ? o.ram_budget : default_ram_budget();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pipeline->cpu_budget = o.cpu_budget ? o.cpu_budget : hw;
  PassContext ctx{pipeline, pass};
  auto root = std::make_unique<RootIterator>(ctx, node_, node_->make(ctx));
  return Iterator(std::move(root));
}

}  // namespace tk::data
