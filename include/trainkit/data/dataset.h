// tk::data::Dataset: tf.data's input pipeline in C++ — a lazy, composable value, iterated on threads.
//
//   using tk::data::Dataset, tk::data::Element, tk::data::AUTOTUNE;
//   Dataset train = Dataset::from_tensor_slices({x_train, y_train})   // elements: (x[i], y[i])
//                       .shuffle(10000, /*seed=*/42)
//                       .map([](Element e) { /* augment e[0] */ return e; }, {.num_parallel_calls = AUTOTUNE})
//                       .batch(128)
//                       .prefetch(AUTOTUNE);
//   model.fit(train, {.epochs = 10});                  // or iterate by hand:
//   tk::data::Iterator it = train.iterator();
//   Element batch;
//   while (it.next(batch)) { /* batch[0]: (128, 28, 28), batch[1]: (128,) */ }
//
// Semantics follow tf.data: shuffle samples uniformly from a buffer refilled from upstream (reshuffled on
// each iteration unless asked not to); batch stacks elements (drop_remainder drops a short last batch);
// cache fills on the first complete pass; map with num_parallel_calls runs on a thread pool and, when
// deterministic (the default), yields elements in input order. AUTOTUNE picks map parallelism and prefetch
// depth from measured stage throughput, within Options::ram_budget and Options::cpu_budget.
// Determinism: with seeds, the elements are the same whatever the parallelism; per-element randomness
// (map with an Rng&) is seeded from (seed, iteration, element index), never from thread timing.
// Copies of a Dataset share their definition (and a cache's contents); iterators are independent.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/data/reader.h"

namespace tk::data {

inline constexpr int64_t AUTOTUNE = -1;
inline constexpr int64_t kInfiniteCardinality = -1;  // tf.data.INFINITE_CARDINALITY
inline constexpr int64_t kUnknownCardinality = -2;   // tf.data.UNKNOWN_CARDINALITY

using Rng = std::mt19937_64;

struct MapOptions {
  int64_t num_parallel_calls = 0;  // 0: in the caller's thread; n: n threads; AUTOTUNE
  bool deterministic = true;       // false: elements may come out of order (whichever is ready first)
  uint64_t seed = 0;               // for map functions that take an Rng&; 0: from set_global_seed
  std::string name = {};           // shown in stall advice and stats ("map" by default)
};

struct InterleaveOptions {
  int64_t cycle_length = 0;        // inputs open at once; 0: cpu_budget
  int64_t block_length = 1;        // consecutive elements taken from each input
  int64_t num_parallel_calls = 0;  // 0: sequential; n or AUTOTUNE: each open input read ahead on its own thread
  bool deterministic = true;
};

// How fit splits a Dataset over MultiWorkerMirroredStrategy's workers (tf.data's AutoShardPolicy; docs/distributed.md).
//   AUTO: as DATA where the pipeline allows it, else every worker reads every batch (one line on rank 0 says why).
//   DATA: each worker keeps its rows of every global batch, cut before the per-element maps, so decoding is divided;
//         fit throws InvalidArgument, saying why, when the pipeline cannot be cut that way.
//   OFF:  every worker reads and decodes every batch and trains on its rows (the environment's TK_AUTO_SHARD=OFF too).
enum class AutoShardPolicy { AUTO, DATA, OFF };

// Pipeline-wide options (tf.data.Options: the autotune section and experimental_distribute.auto_shard_policy).
// Nested with_options merge: the outermost setting of each field wins (0 and AUTO count as unset).
struct Options {
  size_t ram_budget = 0;  // bytes that AUTOTUNE may spend on buffers; 0: half of the available RAM
  int cpu_budget = 0;     // threads AUTOTUNE may use per parallel stage; 0: the hardware thread count
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::AUTO;
};

// What one stage of a running pipeline did (Iterator::stats), for stall advice and tuning.
struct StageStats {
  std::string name;            // "map", "batch", "from_tensor_slices", "tfrecord(train.tfrecord)", ...
  std::string kind;            // the stage type: "map", "prefetch", "batch", "shuffle", "interleave", ...
  int64_t elements = 0;        // produced so far
  double work_seconds = 0;     // time spent producing them (summed over threads), upstream excluded
  double wait_seconds = 0;     // time its consumer spent blocked on it (asynchronous stages)
  int parallelism = 1;         // threads working (map, interleave), current value when autotuned
  int64_t buffer_limit = 0;    // prefetch depth or in-flight limit (asynchronous stages)
  int64_t buffered_bytes = 0;  // bytes held in its buffer now
  bool autotuned = false;
};

// padded_batch's padded_shapes: one shape per component; -1 in a dimension pads it to the batch's longest
// (tf.data's None). Empty: every dimension of every component -1.
using PaddedShapes = std::vector<std::vector<int64_t>>;

class Node;  // a stage of a pipeline definition (src/data/node.h)
class IteratorImpl;

// A running pass over a Dataset. Move-only; destroying it stops its threads (no hang, even mid-pass).
class Iterator {
 public:
  Iterator();
  explicit Iterator(std::unique_ptr<IteratorImpl> impl);
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();
  // The next element; false at the end of the dataset. Rethrows errors from readers and map functions.
  bool next(Element& out);
  // One entry per stage, from the source to the last transformation.
  std::vector<StageStats> stats() const;
  int64_t buffered_bytes() const;  // all asynchronous buffers together (bounded by Options::ram_budget)

 private:
  std::unique_ptr<IteratorImpl> impl_;
};

class Dataset {
 public:
  // ---- sources
  // Slices along dimension 0: element i = (arrays[0][i], arrays[1][i], ...). All must have equal dim 0.
  static Dataset from_tensor_slices(std::vector<Tensor> arrays);
  // The arrays copied once into `device` memory, charged to its budget (an OutOfMemoryError naming the
  // size and the budget when they do not fit); batches are gathered there in shuffled order. On the CPU
  // device this is host memory under the cpu:0 budget.
  static Dataset on_device(const std::vector<Tensor>& arrays, Device device = Device::cpu());
  // int64 scalars start, start + step, ... < stop (> stop when step < 0).
  static Dataset range(int64_t stop);
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  // make() is called at the start of every pass and returns the pass's generator, which fills the next
  // element and returns true, or returns false at the end.
  using Generator = std::function<bool(Element&)>;
  static Dataset from_generator(std::function<Generator()> make, std::string name = "generator");
  // A file format's reader (open_csv, open_hdf5, open_tfrecord, ...), opened afresh for every pass.
  static Dataset from_reader(std::function<std::unique_ptr<ElementReader>()> open, std::string name);
  // Elements of open(files[i]) for every file, interleaved (tf.data's list_files + interleave).
  static Dataset from_files(std::vector<std::string> files, std::function<Dataset(const std::string&)> open,
                            InterleaveOptions options = {});
  // Byte-level language-model data from a text file (the TensorFlow text-generation tutorial's layout):
  // element i = (x = bytes[s, s+T), y = bytes[s+1, s+T+1)) with s = i * sequence_stride, both int32 (T,)
  // holding byte values 0..255 (vocabulary 256), y being x shifted by one (next-byte targets). The default
  // stride (0: T) makes every byte after the first a target exactly once. The file is read once, here;
  // the dataset has random access (fast shuffle / batch). InvalidArgument naming the file and both lengths
  // when it is empty or shorter than T + 1 bytes.
  static Dataset from_text_file(const std::string& path, int64_t sequence_length, int64_t sequence_stride = 0);
  // Element i = (first[i], second[i], ...) flattened; ends with the shortest input.
  static Dataset zip(const std::vector<Dataset>& datasets);

  // ---- transformations (each returns a new Dataset; this one is unchanged)
  Dataset map(std::function<Element(Element)> fn, MapOptions options = {}) const;
  Dataset map(std::function<Element(Element, Rng&)> fn, MapOptions options = {}) const;
  Dataset filter(std::function<bool(const Element&)> predicate) const;
  Dataset shuffle(int64_t buffer_size, uint64_t seed = 0, bool reshuffle_each_iteration = true) const;
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // batch for elements of different shapes (tf.data's padded_batch): each component is padded, at the end of
  // every dimension, to padded_shapes[c] (-1 dims: the longest in this batch; empty: all -1) with
  // padding_values (empty: 0; one value: every component; else one per component, converted to each
  // component's dtype, which is kept). An element larger than a fixed padded dimension is an InvalidArgument
  // naming the input element, the component and both shapes.
  Dataset padded_batch(int64_t batch_size, PaddedShapes padded_shapes = {}, std::vector<double> padding_values = {},
                       bool drop_remainder = false) const;
  // tf.data's bucket_by_sequence_length: element e goes to bucket i where boundaries[i-1] <= length(e) <
  // boundaries[i] (bucket 0 below the first boundary, the last at or above the last one); a bucket's batch
  // of bucket_batch_sizes[i] elements is yielded, padded_batch'ed, as soon as it fills; at the end of the
  // input the partly filled buckets are yielded in increasing bucket order (none with drop_remainder). So
  // the order is a function of the input order alone (tf.data's group_by_window does the same).
  // pad_to_bucket_boundary pads the -1 dims of padded_shapes to boundaries[i] - 1 (padded_shapes must be
  // given: elements here carry no static shape to say which dims vary) and needs every length <
  // max(bucket_boundaries); no_padding batches with batch (equal shapes within a bucket).
  Dataset bucket_by_sequence_length(std::function<int64_t(const Element&)> element_length_func,
                                    std::vector<int64_t> bucket_boundaries, std::vector<int64_t> bucket_batch_sizes,
                                    PaddedShapes padded_shapes = {}, std::vector<double> padding_values = {},
                                    bool pad_to_bucket_boundary = false, bool no_padding = false,
                                    bool drop_remainder = false) const;
  // Sliding windows for time series. tf.data's window yields datasets; here window k is one element whose
  // components stack input elements k*shift + j*stride (j < size): a leading axis of the window length, the
  // same as tf's `ds.window(size, shift, stride, drop_remainder).flat_map(lambda w: w.batch(size))` (zip of
  // each component's batch for tuples). shift 0 means size. Without drop_remainder the last windows may be
  // shorter (a window is yielded while its start is inside the input).
  Dataset window(int64_t size, int64_t shift = 0, int64_t stride = 1, bool drop_remainder = false) const;
  Dataset unbatch() const;
  Dataset repeat(int64_t count = -1) const;  // -1: forever
  Dataset take(int64_t count) const;         // -1: all
  Dataset skip(int64_t count) const;         // -1: all
  // Empty filename: in memory. Otherwise a file written on the first complete pass (to filename.tmp, then
  // renamed) and read on later passes, also by later processes.
  Dataset cache(const std::string& filename = {}) const;
  Dataset prefetch(int64_t buffer_size = AUTOTUNE) const;
  Dataset shard(int64_t num_shards, int64_t index) const;
  Dataset interleave(std::function<Dataset(const Element&)> fn, InterleaveOptions options = {}) const;
  Dataset with_options(Options options) const;

  // ---- inspection
  int64_t cardinality() const;   // elements per pass, kInfiniteCardinality or kUnknownCardinality
  Iterator iterator() const;     // starts a pass (the pass number seeds reshuffling)
  std::string describe() const;  // "from_tensor_slices -> shuffle(10000) -> batch(128) -> prefetch(AUTOTUNE)"
  const std::shared_ptr<Node>& node() const { return node_; }

  explicit Dataset(std::shared_ptr<Node> node) : node_(std::move(node)) {}

 private:
  std::shared_ptr<Node> node_;
};

// keras.utils.timeseries_dataset_from_array: windows of `sequence_length` rows of `data` taken every
// `sampling_rate` rows, starting every `sequence_stride` rows within [start_index, end_index) (end_index -1:
// all rows), batched by `batch_size`; element (window (batch, sequence_length, ...), targets[start]) when
// `targets` is defined, else (window). shuffle draws the windows' order from `seed` (Keras shuffles the
// start positions once per call; here once per pass, reproducibly from the seed).
struct TimeseriesOptions {
  int64_t sequence_stride = 1;
  int64_t sampling_rate = 1;
  int64_t batch_size = 128;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t start_index = 0;
  int64_t end_index = -1;
};
Dataset timeseries_dataset_from_array(const Tensor& data, const Tensor& targets, int64_t sequence_length,
                                      TimeseriesOptions options = {});

// Seed for every shuffle / random map without its own seed (tk::utils::set_random_seed calls this).
void set_global_seed(uint64_t seed);

// Paths matching a glob pattern ("data/train-*.tfrecord"), sorted, then shuffled if asked (a seed makes it
// repeatable). InvalidArgument naming the pattern when nothing matches.
std::vector<std::string> list_files(const std::string& pattern, bool shuffle = false, uint64_t seed = 0);

// "(float32(128, 28, 28), uint8(128,))": an element's components, for error messages.
std::string shapes_of(const Element& e);

// The budget AUTOTUNE uses by default: half of MemAvailable (/proc/meminfo).
size_t default_ram_budget();

}  // namespace tk::data
