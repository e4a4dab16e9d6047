// padded_batch, bucket_by_sequence_length, window, timeseries_dataset_from_array and from_text_file: outputs
// compared with tf.data's / Keras' (tests/fixtures/data/sequence/gen_tf_sequence_ops.py), errors, dtypes,
// determinism and their interaction with shuffle / prefetch / map parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "temp_files.h"
#include "trainkit/core/error.h"
#include "trainkit/data/dataset.h"

namespace tk::data {
namespace {

// One output element as the fixture writes it: per component "dtype [shape]: values".
struct Component {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};
using Expected = std::vector<std::vector<Component>>;

std::map<std::string, Expected> load_fixture() {
  std::ifstream f(std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/sequence/tf_sequence_ops.txt");
  EXPECT_TRUE(f.good()) << "fixture missing";
  std::map<std::string, Expected> cases;
  std::string line, current;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("case ", 0) == 0) {
      current = line.substr(5);
      cases[current];
      continue;
    }
    std::vector<Component> element;
    std::stringstream parts(line);
    std::string part;
    while (std::getline(parts, part, '|')) {
      Component c;
      std::string shape_text = part.substr(part.find('[') + 1, part.find(']') - part.find('[') - 1);
      std::stringstream head(part);
      head >> c.dtype;
      for (char& ch : shape_text)
        if (ch == ',') ch = ' ';
      std::stringstream sh(shape_text);
      for (int64_t d; sh >> d;) c.shape.push_back(d);
      std::stringstream vals(part.substr(part.find(':') + 1));
      for (double v; vals >> v;) c.values.push_back(v);
      element.push_back(std::move(c));
    }
    cases[current].push_back(std::move(element));
  }
  return cases;
}

const Expected& expected(const std::string& name) {
  static const std::map<std::string, Expected> cases = load_fixture();
  auto it = cases.find(name);
  if (it == cases.end()) throw std::runtime_error("no fixture case " + name);
  return it->second;
}

double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[i];
    case DType::i32:
      return t.data<int32_t>()[i];
    case DType::i64:
      return static_cast<double>(t.data<int64_t>()[i]);
    default:
      return t.to(DType::f32).data<float>()[i];
  }
}

void expect_matches(const Dataset& d, const std::string& name) {
  SCOPED_TRACE(name);
  const Expected& want = expected(name);
  Iterator it = d.iterator();
  Element e;
  size_t k = 0;
  for (; it.next(e); ++k) {
    ASSERT_LT(k, want.size()) << "more elements than tf.data";
    ASSERT_EQ(e.size(), want[k].size()) << "element " << k;
    for (size_t c = 0; c < e.size(); ++c) {
      const Component& w = want[k][c];
      EXPECT_EQ(std::string(dtype_name(e[c].dtype())), w.dtype) << "element " << k << " component " << c;
      ASSERT_EQ(e[c].shape().dims(), w.shape) << "element " << k << " component " << c;
      for (int64_t i = 0; i < e[c].numel(); ++i)
        ASSERT_EQ(value_at(e[c], i), w.values[static_cast<size_t>(i)])
            << "element " << k << " component " << c << " at " << i;
    }
  }
  EXPECT_EQ(k, want.size()) << "fewer elements than tf.data";
}

// Elements of the given int32 / int64 rows, element-by-element (no random access), as tf's from_generator.
template <typename T>
Dataset ragged(std::vector<std::vector<T>> rows) {
  auto shared = std::make_shared<std::vector<std::vector<T>>>(std::move(rows));
  return Dataset::from_generator([shared] {
    auto i = std::make_shared<size_t>(0);
    return Dataset::Generator([shared, i](Element& e) {
      if (*i >= shared->size()) return false;
      const auto& r = (*shared)[(*i)++];
      e = {Tensor::from_vector<T>({static_cast<int64_t>(r.size())}, r)};
      return true;
    });
  });
}

// tf's A = range(1, n, int32).map(lambda x: fill([x], x)).
Dataset fills(int32_t n) {
  std::vector<std::vector<int32_t>> rows;
  for (int32_t x = 1; x < n; ++x) rows.emplace_back(static_cast<size_t>(x), x);
  return ragged(rows);
}

int64_t length0(const Element& e) { return e[0].dim(0); }

// ---- padded_batch

TEST(PaddedBatch, MatchesTfDataDocumentedExamples) {
  const Dataset a = fills(5);
  expect_matches(a.padded_batch(2), "padded_batch_longest");
  expect_matches(a.padded_batch(2, {{5}}), "padded_batch_fixed5");
  expect_matches(a.padded_batch(2, {{5}}, {-1}), "padded_batch_value-1");
  expect_matches(Dataset::zip({a, a}).padded_batch(2, {}, {-1}), "padded_batch_zip_one_value");
  const Dataset nested = Dataset::zip({ragged<int32_t>({{1, 2, 3}, {4, 5}}), ragged<int32_t>({{10}, {11, 12}})});
  expect_matches(nested.padded_batch(2, {{4}, {-1}}, {-1, 100}), "padded_batch_per_component");
}

TEST(PaddedBatch, RemainderDropRemainderAndCardinality) {
  expect_matches(fills(6).padded_batch(2), "padded_batch_remainder");
  expect_matches(fills(6).padded_batch(2, {}, {}, true), "padded_batch_drop_remainder");
  const Dataset r = Dataset::range(5).map([](Element e) { return e; });
  EXPECT_EQ(Dataset::range(5).padded_batch(2).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5).padded_batch(2, {}, {}, true).cardinality(), 2);
  EXPECT_EQ(r.padded_batch(2).describe(), "range(0, 5) -> map -> padded_batch(2)");
}

TEST(PaddedBatch, TwoDimensionalFloatAndInt64KeepTheirDtypes) {
  // tf: range(1, 4).map(x -> (fill([x, 4 - x], x * 0.5), x)).padded_batch(3, padding_values=(-1.5, 7)).
  Dataset d = Dataset::range(1, 4).map([](Element e) {
    const int64_t x = *e[0].data<int64_t>();
    Tensor f = Tensor::full(Shape({x, 4 - x}), static_cast<float>(x) * 0.5f);
    return Element{f, e[0]};
  });
  expect_matches(d.padded_batch(3, {}, {-1.5, 7}), "padded_batch_2d_float");
}

TEST(PaddedBatch, FixedShapeSmallerThanAnElementNamesElementComponentAndShapes) {
  try {
    Iterator it = fills(5).padded_batch(2, {{3}}).iterator();
    Element e;
    ASSERT_TRUE(it.next(e));  // elements 0, 1 fit
    it.next(e);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("input element 3"), std::string::npos) << m;
    EXPECT_NE(m.find("component 0"), std::string::npos) << m;
    EXPECT_NE(m.find("(4,)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3,)"), std::string::npos) << m;
  }
}

TEST(PaddedBatch, BadArgumentsAreClearErrors) {
  EXPECT_THROW(fills(3).padded_batch(0), InvalidArgument);
  EXPECT_THROW(fills(3).padded_batch(2, {{-2}}), InvalidArgument);
  const auto first_error = [](const Dataset& d) {
    try {
      Element e;
      d.iterator().next(e);
    } catch (const InvalidArgument& err) {
      return std::string(err.what());
    }
    return std::string();
  };
  EXPECT_NE(first_error(fills(3).padded_batch(2, {{-1}, {-1}})).find("padded_shapes has 2 entries"), std::string::npos);
  EXPECT_NE(first_error(fills(3).padded_batch(2, {{-1, -1}})).find("rank 2"), std::string::npos);
  EXPECT_NE(first_error(fills(3).padded_batch(2, {}, {1, 2})).find("padding_values has 2 entries"), std::string::npos);
  // Mixed dtypes within a component.
  Dataset mixed = Dataset::zip({Dataset::range(2)}).map([](Element e) {
    return *e[0].data<int64_t>() == 0 ? Element{Tensor::zeros({2})} : Element{Tensor::zeros({2}, DType::i32)};
  });
  EXPECT_NE(first_error(mixed.padded_batch(2)).find("input element 1"), std::string::npos);
}

TEST(PaddedBatch, DeterministicThroughParallelMapShuffleAndPrefetch) {
  const auto run = [](int64_t parallel) {
    Dataset d = Dataset::range(40)
                    .shuffle(16, 7)
                    .map(
                        [](Element e) {
                          const int64_t x = *e[0].data<int64_t>();
                          return Element{Tensor::full(Shape({x % 7 + 1}), static_cast<float>(x))};
                        },
                        {.num_parallel_calls = parallel})
                    .padded_batch(4, {}, {-1})
                    .prefetch(AUTOTUNE);
    std::vector<std::vector<float>> out;
    Iterator it = d.iterator();
    Element e;
    while (it.next(e)) out.emplace_back(e[0].data<float>(), e[0].data<float>() + e[0].numel());
    return out;
  };
  const auto a = run(0);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(a, run(3));
  EXPECT_EQ(a, run(AUTOTUNE));
}

// ---- bucket_by_sequence_length

std::vector<std::vector<int32_t>> leftover_seqs() {
  std::vector<std::vector<int32_t>> s;
  const int lengths[] = {1, 7, 2, 4, 3, 9, 5, 1, 6, 2, 8};
  for (int i = 0; i < 11; ++i) s.emplace_back(static_cast<size_t>(lengths[i]), i + 1);
  return s;
}

TEST(BucketBySequenceLength, MatchesTfData) {
  expect_matches(ragged<int64_t>({{0}, {1, 2, 3, 4}, {5, 6, 7}, {7, 8, 9, 10, 11}, {13, 14, 15, 16, 19, 20}, {21, 22}})
                     .bucket_by_sequence_length(length0, {3, 5}, {2, 2, 2}),
                 "bucket_doc");
  // A bucket's batch comes out when it fills; the leftovers at the end, in increasing bucket order.
  expect_matches(ragged(leftover_seqs()).bucket_by_sequence_length(length0, {3, 6}, {3, 2, 2}), "bucket_leftovers");
  expect_matches(
      ragged(leftover_seqs()).bucket_by_sequence_length(length0, {3, 6}, {3, 2, 2}, {}, {}, false, false, true),
      "bucket_drop_remainder");
  std::vector<std::vector<int32_t>> short_seqs;
  for (auto& s : leftover_seqs())
    if (s.size() < 6) short_seqs.push_back(s);
  expect_matches(ragged(short_seqs).bucket_by_sequence_length(length0, {3, 6}, {2, 2, 2}, {{-1}}, {-1}, true),
                 "bucket_pad_to_boundary");
  std::vector<std::vector<int32_t>> same;
  for (int i = 1; i < 8; ++i) same.emplace_back(i % 2 ? 2 : 5, i);
  expect_matches(ragged(same).bucket_by_sequence_length(length0, {3}, {2, 2}, {}, {}, false, true),
                 "bucket_no_padding");
}

TEST(BucketBySequenceLength, ArgumentErrors) {
  const Dataset d = ragged(leftover_seqs());
  try {
    d.bucket_by_sequence_length(length0, {3, 6}, {2, 2});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("len(bucket_batch_sizes) must equal len(bucket_boundaries) + 1"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("len(bucket_batch_sizes)=2"), std::string::npos);
  }
  EXPECT_THROW(d.bucket_by_sequence_length(length0, {6, 3}, {1, 1, 1}), InvalidArgument);
  EXPECT_THROW(d.bucket_by_sequence_length(length0, {3}, {1, 0}), InvalidArgument);
  EXPECT_THROW(d.bucket_by_sequence_length(nullptr, {3}, {1, 1}), InvalidArgument);
  EXPECT_THROW(d.bucket_by_sequence_length(length0, {3}, {1, 1}, {}, {}, true), InvalidArgument);  // no shapes
  // pad_to_bucket_boundary: a length >= the last boundary is an error naming it (TF's message).
  try {
    Iterator it = d.bucket_by_sequence_length(length0, {3, 6}, {2, 2, 2}, {{-1}}, {}, true).iterator();
    Element e;
    while (it.next(e)) {
    }
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("input element 1"), std::string::npos) << m;
    EXPECT_NE(m.find("length 7"), std::string::npos) << m;
    EXPECT_NE(m.find("elements must have length < max(bucket_boundaries)"), std::string::npos) << m;
  }
}

TEST(BucketBySequenceLength, DeterministicAfterShuffleWithSeedAndPrefetch) {
  const auto run = [] {
    Dataset d = ragged(leftover_seqs())
                    .repeat(3)
                    .shuffle(8, 11)
                    .bucket_by_sequence_length(length0, {3, 6}, {3, 2, 2})
                    .prefetch(2);
    std::vector<std::vector<int32_t>> out;
    Iterator it = d.iterator();
    Element e;
    int64_t rows = 0;
    while (it.next(e)) {
      rows += e[0].dim(0);
      out.emplace_back(e[0].data<int32_t>(), e[0].data<int32_t>() + e[0].numel());
    }
    EXPECT_EQ(rows, 33);  // every element, once
    return out;
  };
  EXPECT_EQ(run(), run());
}

// ---- window

Dataset windows(int64_t n, int64_t size, int64_t shift, int64_t stride, bool drop) {
  return Dataset::range(n).window(size, shift, stride, drop);
}

TEST(Window, MatchesTfDataWindowFlatMapBatch) {
  expect_matches(windows(7, 3, 2, 1, false), "window_3_2");
  expect_matches(windows(7, 3, 2, 1, true), "window_3_2_drop");
  expect_matches(windows(7, 3, 1, 2, false), "window_3_1_2");
  expect_matches(windows(7, 3, 1, 2, true), "window_3_1_2_drop");
  expect_matches(windows(11, 2, 5, 1, false), "window_2_5");
  Dataset pairs = Dataset::range(5).map([](Element e) {
    return Element{e[0], Tensor::full(Shape({2}), static_cast<float>(*e[0].data<int64_t>()))};
  });
  expect_matches(pairs.window(4, 3), "window_tuple_4_3");
}

TEST(Window, CardinalityAgreesWithTheElementsYielded) {
  for (int64_t n : {0, 1, 5, 7, 11})
    for (int64_t size : {1, 2, 3})
      for (int64_t shift : {1, 2, 5})
        for (int64_t stride : {1, 2})
          for (bool drop : {false, true}) {
            const Dataset d = windows(n, size, shift, stride, drop);
            int64_t count = 0;
            Iterator it = d.iterator();
            Element e;
            while (it.next(e)) ++count;
            EXPECT_EQ(d.cardinality(), count) << n << " " << size << " " << shift << " " << stride << " " << drop;
          }
}

TEST(Window, ShiftDefaultsToSizeAndErrors) {
  std::vector<int64_t> lengths, firsts;
  Iterator it = Dataset::range(7).window(3).iterator();
  Element e;
  while (it.next(e)) {
    lengths.push_back(e[0].dim(0));
    firsts.push_back(e[0].data<int64_t>()[0]);
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 3, 6}));
  EXPECT_THROW(Dataset::range(7).window(0), InvalidArgument);
  EXPECT_THROW(Dataset::range(7).window(2, -1), InvalidArgument);
  EXPECT_THROW(Dataset::range(7).window(2, 1, 0), InvalidArgument);
  // Elements of different shapes in one window: an error naming the window stage.
  try {
    Iterator bad = fills(4).window(2).iterator();
    bad.next(e);
    FAIL();
  } catch (const InvalidArgument& err) {
    EXPECT_NE(std::string(err.what()).find("window"), std::string::npos);
  }
}

TEST(Window, ThenBatchForForecasting) {
  // A time-series pipeline: windows of 4 steps, shuffled with a seed, batched, prefetched; the same twice.
  const auto run = [] {
    Dataset d = Dataset::range(20).window(4, 1, 1, true).shuffle(8, 3).batch(5).prefetch(AUTOTUNE);
    std::vector<int64_t> out;
    Iterator it = d.iterator();
    Element e;
    while (it.next(e)) {
      EXPECT_EQ(e[0].shape().rank(), 2);
      EXPECT_EQ(e[0].dim(1), 4);
      for (int64_t r = 0; r < e[0].dim(0); ++r)  // each row is 4 consecutive steps
        for (int64_t j = 1; j < 4; ++j) EXPECT_EQ(e[0].data<int64_t>()[r * 4 + j], e[0].data<int64_t>()[r * 4] + j);
      out.insert(out.end(), e[0].data<int64_t>(), e[0].data<int64_t>() + e[0].numel());
    }
    EXPECT_EQ(out.size(), 17u * 4);
    return out;
  };
  EXPECT_EQ(run(), run());
}

// ---- timeseries_dataset_from_array

TEST(TimeseriesDatasetFromArray, MatchesKeras) {
  std::vector<float> v(20);
  for (int i = 0; i < 20; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor data = Tensor::from_vector<float>({10, 2}, v);
  std::vector<int32_t> t(10);
  for (int i = 0; i < 10; ++i) t[static_cast<size_t>(i)] = 100 + i;
  const Tensor targets = Tensor::from_vector<int32_t>({10}, t);
  expect_matches(timeseries_dataset_from_array(data, targets, 3, {.batch_size = 4}), "timeseries_basic");
  expect_matches(
      timeseries_dataset_from_array(data, targets, 3, {.sequence_stride = 2, .sampling_rate = 2, .batch_size = 2}),
      "timeseries_stride_rate");
  expect_matches(timeseries_dataset_from_array(data, Tensor(), 2, {.batch_size = 3, .start_index = 2, .end_index = 8}),
                 "timeseries_range_no_targets");
  expect_matches(timeseries_dataset_from_array(data, targets, 2, {.batch_size = 3, .start_index = 2, .end_index = 8}),
                 "timeseries_range_targets");
}

TEST(TimeseriesDatasetFromArray, ShuffleIsAPermutationReproducibleFromTheSeed) {
  const Tensor data = Tensor::from_vector<float>({12}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const auto firsts = [&](uint64_t seed) {
    std::vector<float> out;
    Iterator it =
        timeseries_dataset_from_array(data, Tensor(), 3, {.batch_size = 4, .shuffle = true, .seed = seed}).iterator();
    Element e;
    while (it.next(e))
      for (int64_t r = 0; r < e[0].dim(0); ++r) out.push_back(e[0].data<float>()[r * 3]);
    return out;
  };
  std::vector<float> a = firsts(5);
  EXPECT_EQ(a, firsts(5));
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(TimeseriesDatasetFromArray, Errors) {
  const Tensor data = Tensor::zeros({10, 2});
  EXPECT_THROW(timeseries_dataset_from_array(data, Tensor::zeros({9}), 3), InvalidArgument);
  EXPECT_THROW(timeseries_dataset_from_array(data, Tensor(), 0), InvalidArgument);
  EXPECT_THROW(timeseries_dataset_from_array(data, Tensor(), 3, {.start_index = 10}), InvalidArgument);
  EXPECT_THROW(timeseries_dataset_from_array(data, Tensor(), 3, {.start_index = 4, .end_index = 4}), InvalidArgument);
  EXPECT_THROW(timeseries_dataset_from_array(data, Tensor(), 3, {.sampling_rate = 0}), InvalidArgument);
}

// ---- from_text_file

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = test::temp_path(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(FromTextFile, NextByteTargetsAsInt32) {
  const std::string path = write_text("abc.txt", "hello, world\n\xff");  // 14 bytes
  Dataset d = Dataset::from_text_file(path, 4);
  EXPECT_EQ(d.cardinality(), 3);  // starts 0, 4, 8 (8 + 4 + 1 <= 14); 12 would need 17
  Iterator it = d.iterator();
  Element e;
  ASSERT_TRUE(it.next(e));
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].dtype(), DType::i32);
  EXPECT_EQ(e[0].shape(), Shape({4}));
  EXPECT_EQ(std::vector<int32_t>(e[0].data<int32_t>(), e[0].data<int32_t>() + 4),
            (std::vector<int32_t>{'h', 'e', 'l', 'l'}));
  EXPECT_EQ(std::vector<int32_t>(e[1].data<int32_t>(), e[1].data<int32_t>() + 4),
            (std::vector<int32_t>{'e', 'l', 'l', 'o'}));
  ASSERT_TRUE(it.next(e));
  ASSERT_TRUE(it.next(e));
  EXPECT_EQ(e[1].data<int32_t>()[3], '\n');
  EXPECT_FALSE(it.next(e));
  // Overlapping sequences with a stride; bytes >= 128 are 128..255, not negative.
  Dataset s = Dataset::from_text_file(path, 4, 1);
  EXPECT_EQ(s.cardinality(), 10);
  Iterator last = s.skip(9).iterator();
  ASSERT_TRUE(last.next(e));
  EXPECT_EQ(e[1].data<int32_t>()[3], 255);
  // Batches through shuffle: (batch, T) int32 pairs.
  Iterator b = Dataset::from_text_file(path, 4, 1).shuffle(10, 1).batch(4).iterator();
  ASSERT_TRUE(b.next(e));
  EXPECT_EQ(e[0].shape(), Shape({4, 4}));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t t = 0; t < 3; ++t) EXPECT_EQ(e[0].data<int32_t>()[r * 4 + t + 1], e[1].data<int32_t>()[r * 4 + t]);
}

TEST(FromTextFile, EmptyShortAndMissingFilesNameTheFileAndLengths) {
  const std::string empty = write_text("empty.txt", "");
  const std::string short_file = write_text("short.txt", "abcd");
  const auto message = [](const std::string& path, int64_t t) {
    try {
      Dataset::from_text_file(path, t);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(empty, 4).find("empty.txt"), std::string::npos);
  EXPECT_NE(message(empty, 4).find("is empty"), std::string::npos);
  const std::string m = message(short_file, 4);
  EXPECT_NE(m.find("short.txt"), std::string::npos) << m;
  EXPECT_NE(m.find("has 4 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("sequence_length 4 needs at least 5"), std::string::npos) << m;
  EXPECT_NE(message(test::temp_path("missing.txt"), 4).find("cannot open"), std::string::npos);
  EXPECT_TRUE(message(short_file, 3).empty());
  EXPECT_THROW(Dataset::from_text_file(short_file, 0), InvalidArgument);
}

}  // namespace
}  // namespace tk::data
