// tk::data::Dataset: tf.data semantics, determinism across parallelism, cancellation, caching, AUTOTUNE.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include "trainkit/core/error.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/stall.h"

namespace tk::data {
namespace {

int64_t scalar(const Tensor& t) {
  return t.dtype() == DType::i64 ? *t.data<int64_t>() : static_cast<int64_t>(*t.data<float>());
}

Tensor i64_scalar(int64_t v) {
  Tensor t(Shape(std::vector<int64_t>{}), DType::i64);
  *t.data<int64_t>() = v;
  return t;
}

// All elements of one pass, component 0 as integers (scalars) or flattened.
std::vector<int64_t> values(const Dataset& d) {
  std::vector<int64_t> out;
  Iterator it = d.iterator();
  Element e;
  while (it.next(e)) {
    const Tensor& t = e[0];
    if (t.dtype() == DType::i64)
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<int64_t>()[i]);
    else
      for (int64_t i = 0; i < t.numel(); ++i) out.push_back(static_cast<int64_t>(t.data<float>()[i]));
  }
  return out;
}

std::vector<int64_t> iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// The same elements as range(n) through a generator: no random access, so every stage takes the
// element-by-element path.
Dataset generated_range(int64_t n, std::atomic<int>* passes = nullptr) {
  return Dataset::from_generator([n, passes] {
    if (passes) ++*passes;
    auto i = std::make_shared<int64_t>(0);
    return Dataset::Generator([n, i](Element& e) {
      if (*i >= n) return false;
      e.assign(1, i64_scalar((*i)++));
      return true;
    });
  });
}

void spin_for(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(Dataset, FromTensorSlicesYieldsRowsOfEveryArray) {
  Tensor x = Tensor::from_vector<float>({3, 2}, {0, 1, 2, 3, 4, 5});
  Tensor y = Tensor::from_vector<int32_t>({3}, {7, 8, 9});
  Dataset d = Dataset::from_tensor_slices({x, y});
  EXPECT_EQ(d.cardinality(), 3);
  Iterator it = d.iterator();
  Element e;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(it.next(e));
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].shape(), Shape({2}));
    EXPECT_EQ(e[0].data<float>()[1], static_cast<float>(2 * i + 1));
    EXPECT_EQ(e[1].shape(), Shape(std::vector<int64_t>{}));
    EXPECT_EQ(e[1].data<int32_t>()[0], 7 + i);
  }
  EXPECT_FALSE(it.next(e));
  EXPECT_FALSE(it.next(e));  // stays at the end
}

TEST(Dataset, FromTensorSlicesRejectsMismatchedRowCounts) {
  try {
    Dataset::from_tensor_slices({Tensor::zeros({3, 2}), Tensor::zeros({4})});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("array 1 has 4 rows but array 0 has 3"), std::string::npos) << e.what();
  }
}

TEST(Dataset, RangeAndCardinality) {
  EXPECT_EQ(values(Dataset::range(5)), iota(5));
  EXPECT_EQ(values(Dataset::range(2, 11, 3)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(values(Dataset::range(5, 0, -2)), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(Dataset::range(10).batch(3).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).batch(3, true).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(Dataset::range(10).repeat().take(7).cardinality(), 7);
  EXPECT_EQ(Dataset::range(10).filter([](const Element&) { return true; }).cardinality(), kUnknownCardinality);
  EXPECT_EQ(Dataset::range(10).shard(3, 1).cardinality(), 3);
  EXPECT_EQ(Dataset::range(10).skip(4).cardinality(), 6);
}

TEST(Dataset, GeneratorIsRestartedForEveryPass) {
  std::atomic<int> passes{0};
  Dataset d = generated_range(4, &passes);
  EXPECT_EQ(values(d), iota(4));
  EXPECT_EQ(values(d), iota(4));
  EXPECT_EQ(passes.load(), 2);
}

TEST(Dataset, BatchDropRemainderAndShapes) {
  Tensor x = Tensor::zeros({10, 3});
  Iterator it = Dataset::from_tensor_slices({x}).batch(4).iterator();
  Element b;
  std::vector<int64_t> sizes;
  while (it.next(b)) {
    EXPECT_EQ(b[0].shape().rank(), 2);
    sizes.push_back(b[0].dim(0));
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(values(Dataset::range(10).batch(4, true)), iota(8));
}

TEST(Dataset, BatchOfUnequalShapesNamesBoth) {
  int k = 0;
  Dataset d = Dataset::from_generator([&k] {
    k = 0;
    return Dataset::Generator([&k](Element& e) {
      if (k >= 2) return false;
      e.assign(1, Tensor::zeros({k + 1}));
      ++k;
      return true;
    });
  });
  Iterator it = d.batch(2).iterator();
  Element b;
  try {
    it.next(b);
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("float32(2,)"), std::string::npos) << m;
    EXPECT_NE(m.find("float32(1,)"), std::string::npos) << m;
  }
}

TEST(Dataset, UnbatchInvertsBatch) {
  EXPECT_EQ(values(Dataset::range(7).batch(3).unbatch()), iota(7));
  EXPECT_EQ(values(generated_range(7).batch(3).unbatch()), iota(7));
}

TEST(Dataset, RepeatTakeSkipShard) {
  EXPECT_EQ(values(Dataset::range(3).repeat(2)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(values(Dataset::range(3).repeat().take(7)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(values(Dataset::range(3).repeat(0)), std::vector<int64_t>{});
  EXPECT_EQ(values(Dataset::range(0).repeat()), std::vector<int64_t>{});  // empty forever is still empty
  EXPECT_EQ(values(Dataset::range(6).skip(4)), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(values(Dataset::range(6).skip(-1)), std::vector<int64_t>{});
  EXPECT_EQ(values(Dataset::range(10).shard(3, 1)), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(values(generated_range(10).shard(3, 2)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(values(generated_range(5).repeat(2).take(6)), (std::vector<int64_t>{0, 1, 2, 3, 4, 0}));
}

TEST(Dataset, FilterKeepsMatchingElements) {
  auto even = [](const Element& e) { return scalar(e[0]) % 2 == 0; };
  EXPECT_EQ(values(Dataset::range(9).filter(even)), (std::vector<int64_t>{0, 2, 4, 6, 8}));
}

TEST(Dataset, ShuffleIsAPermutationRepeatableBySeedAndReshuffledEachPass) {
  Dataset d = Dataset::range(100).shuffle(20, 7);
  std::vector<int64_t> a = values(d), b = values(d);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));
  EXPECT_NE(a, iota(100));
  EXPECT_NE(a, b);                                           // reshuffle_each_iteration
  EXPECT_EQ(values(Dataset::range(100).shuffle(20, 7)), a);  // same seed, same first pass
  Dataset fixed = Dataset::range(100).shuffle(20, 7, false);
  EXPECT_EQ(values(fixed), values(fixed));
  // A buffer of 20 cannot move an element more than 19 places earlier.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(a[i], static_cast<int64_t>(i) + 19);
}

TEST(Dataset, RandomAccessFastPathMatchesElementByElementPath) {
  // range() has random access (indices flow, batch gathers); the generator does not. Same seeds, same data.
  Dataset fast = Dataset::range(1000).shuffle(64, 3).repeat(2).skip(5).take(1500).shard(2, 1).batch(32);
  Dataset slow = generated_range(1000).shuffle(64, 3).repeat(2).skip(5).take(1500).shard(2, 1).batch(32);
  EXPECT_EQ(values(fast), values(slow));
  EXPECT_EQ(values(fast), values(slow));  // and the second pass (reshuffled) as well
}

TEST(Dataset, ParallelMapKeepsOrderAndMatchesSequential) {
  auto square = [](Element e) {
    const int64_t v = scalar(e[0]);
    spin_for(std::chrono::microseconds(v % 7 == 0 ? 200 : 5));  // uneven work reorders completion
    return Element{i64_scalar(v * v)};
  };
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 300; ++i) want.push_back(i * i);
  EXPECT_EQ(values(Dataset::range(300).map(square)), want);
  EXPECT_EQ(values(Dataset::range(300).map(square, {.num_parallel_calls = 4})), want);
  EXPECT_EQ(values(Dataset::range(300).map(square, {.num_parallel_calls = AUTOTUNE})), want);
  std::vector<int64_t> any = values(Dataset::range(300).map(square, {.num_parallel_calls = 4, .deterministic = false}));
  std::sort(any.begin(), any.end());
  EXPECT_EQ(any, want);
}

TEST(Dataset, RandomMapIsDeterministicWhateverTheParallelism) {
  auto noisy = [](Element e, Rng& rng) {
    return Element{i64_scalar(scalar(e[0]) * 1000 + static_cast<int64_t>(rng() % 1000))};
  };
  auto pipeline = [&](int64_t parallel) {
    return Dataset::range(500)
        .shuffle(50, 11)
        .map(noisy, {.num_parallel_calls = parallel, .seed = 99})
        .batch(16)
        .prefetch(AUTOTUNE);
  };
  const std::vector<int64_t> ref = values(pipeline(0));
  EXPECT_EQ(values(pipeline(1)), ref);
  EXPECT_EQ(values(pipeline(3)), ref);
  EXPECT_EQ(values(pipeline(AUTOTUNE)), ref);
  // The second pass draws differently (the pass number seeds it) but is again the same for all parallelisms.
  Dataset a = pipeline(0), b = pipeline(4);
  values(a);
  values(b);
  EXPECT_EQ(values(a), values(b));
  EXPECT_NE(values(a), ref);
}

TEST(Dataset, MapErrorsReachTheConsumerAtTheirElement) {
  auto fail_at_5 = [](Element e) {
    if (scalar(e[0]) == 5) throw InvalidArgument("bad element 5");
    return e;
  };
  for (int64_t p : {int64_t{0}, int64_t{3}}) {
    Iterator it = Dataset::range(10).map(fail_at_5, {.num_parallel_calls = p}).prefetch(2).iterator();
    Element e;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(it.next(e));
      EXPECT_EQ(scalar(e[0]), i);
    }
    EXPECT_THROW(it.next(e), InvalidArgument) << "parallelism " << p;
  }
}

TEST(Dataset, ReaderErrorsPropagateThroughPrefetch) {
  Dataset d = Dataset::from_generator([] {
    auto i = std::make_shared<int>(0);
    return Dataset::Generator([i](Element& e) {
      if (*i == 3) throw FormatError("corrupt.bin at offset 12: bad record");
      e.assign(1, i64_scalar((*i)++));
      return true;
    });
  });
  Iterator it = d.prefetch(AUTOTUNE).iterator();
  Element e;
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(it.next(e));
  EXPECT_THROW(it.next(e), FormatError);
}

TEST(Dataset, DestroyingAnIteratorMidPassStopsItsThreads) {
  // Infinite input, full buffers, threads blocked on every stage: destruction must not hang.
  for (int round = 0; round < 20; ++round) {
    Dataset d = Dataset::range(1000000)
                    .repeat()
                    .map([](Element e) { return e; }, {.num_parallel_calls = 3})
                    .prefetch(4)
                    .map([](Element e) { return e; }, {.num_parallel_calls = 2, .deterministic = false})
                    .prefetch(AUTOTUNE);
    Iterator it = d.iterator();
    Element e;
    for (int i = 0; i < round; ++i) ASSERT_TRUE(it.next(e));
  }
}

TEST(Dataset, MemoryCacheFillsOnACompletePassOnly) {
  std::atomic<int> passes{0};
  Dataset d = generated_range(5, &passes).cache();
  {
    Iterator it = d.iterator();  // a partial pass leaves no cache
    Element e;
    it.next(e);
  }
  EXPECT_EQ(values(d), iota(5));
  EXPECT_EQ(values(d), iota(5));
  EXPECT_EQ(values(d.map([](Element e) {
              *e[0].data<int64_t>() += 100;  // writing into an element must not change the cache
              return e;
            })),
            iota(5, 100));
  EXPECT_EQ(values(d), iota(5));
  EXPECT_EQ(passes.load(), 2);
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::path(::testing::TempDir()) / ("tk_ds_" + std::to_string(getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

TEST(Dataset, FileCacheIsWrittenAtomicallyAndReread) {
  TempDir dir;
  const std::string file = dir / "train.cache";
  std::atomic<int> passes{0};
  auto make = [&] {
    return generated_range(6, &passes).map([](Element e) { return Element{e[0], Tensor::full({2}, 1.5f)}; });
  };
  {
    Iterator it = make().cache(file).iterator();
    Element e;
    it.next(e);
  }
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_FALSE(std::filesystem::exists(file + ".tmp"));
  EXPECT_EQ(values(make().cache(file)), iota(6));
  EXPECT_TRUE(std::filesystem::exists(file));
  const int before = passes.load();
  Iterator it = make().cache(file).iterator();  // a new definition, as in a later process: reads the file
  Element e;
  int n = 0;
  while (it.next(e)) {
    EXPECT_EQ(scalar(e[0]), n++);
    EXPECT_EQ(e[1].data<float>()[1], 1.5f);
  }
  EXPECT_EQ(n, 6);
  EXPECT_EQ(passes.load(), before);

  // A damaged file names itself and the offset.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 5);
  Iterator bad = make().cache(file).iterator();
  try {
    while (bad.next(e)) {
    }
    FAIL();
  } catch (const FormatError& err) {
    EXPECT_NE(std::string(err.what()).find(file), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("offset"), std::string::npos) << err.what();
  }
}

TEST(Dataset, ZipPairsElementsAndStopsAtTheShortest) {
  Iterator it = Dataset::zip({Dataset::range(3), Dataset::range(10, 20)}).iterator();
  Element e;
  int n = 0;
  while (it.next(e)) {
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(scalar(e[1]), scalar(e[0]) + 10);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(Dataset, InterleaveOrderMatchesTfData) {
  // The example in tf.data's documentation: Dataset.range(1, 6).interleave(
  //     lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
  auto inner = [](const Element& e) {
    return Dataset::range(6).map([v = scalar(e[0])](Element) { return Element{i64_scalar(v)}; });
  };
  const std::vector<int64_t> want{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                  3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  EXPECT_EQ(values(Dataset::range(1, 6).interleave(inner, {.cycle_length = 2, .block_length = 4})), want);
  EXPECT_EQ(
      values(Dataset::range(1, 6).interleave(inner, {.cycle_length = 2, .block_length = 4, .num_parallel_calls = 2})),
      want);
}

TEST(Dataset, FromFilesReadsEveryFile) {
  TempDir dir;
  for (int f = 0; f < 3; ++f)
    std::ofstream(dir / ("part-" + std::to_string(f) + ".txt")) << f * 10 << " " << f * 10 + 1;
  std::vector<std::string> files = list_files(dir / "part-*.txt");
  ASSERT_EQ(files.size(), 3u);
  Dataset d = Dataset::from_files(files,
                                  [](const std::string& path) {
                                    return Dataset::from_generator([path] {
                                      auto in = std::make_shared<std::ifstream>(path);
                                      return Dataset::Generator([in](Element& e) {
                                        int64_t v = 0;
                                        if (!(*in >> v)) return false;
                                        e.assign(1, i64_scalar(v));
                                        return true;
                                      });
                                    });
                                  },
                                  {.cycle_length = 3, .num_parallel_calls = AUTOTUNE});
  EXPECT_EQ(values(d), (std::vector<int64_t>{0, 10, 20, 1, 11, 21}));  // cycle 3, block 1
  EXPECT_THROW(list_files(dir / "nothing-*.bin"), InvalidArgument);
}

TEST(Dataset, PrefetchAutotuneGrowsWhenTheConsumerFindsItEmpty) {
  // A controlled source, not a slow one: element i is made only once the consumer has asked for it, so the
  // consumer finds the prefetch buffer empty (nearly) every time, however loaded the machine is. Each time is
  // one more slot (tf.data's heuristic), within the RAM budget.
  auto asked = std::make_shared<std::atomic<int64_t>>(0);
  auto stop = std::make_shared<std::atomic<bool>>(false);
  Dataset d = Dataset::range(60)
                  .map([asked, stop](Element e) {
                    const int64_t i = e[0].data<int64_t>()[0];
                    while (asked->load() <= i && !stop->load()) std::this_thread::yield();
                    return e;
                  })
                  .prefetch(AUTOTUNE);
  Iterator it = d.iterator();
  Element e;
  int64_t n = 0;
  for (;; ++n) {
    asked->store(n + 1);
    if (!it.next(e)) break;
    ASSERT_EQ(e[0].data<int64_t>()[0], n);
  }
  stop->store(true);
  EXPECT_EQ(n, 60);
  const std::vector<StageStats> s = it.stats();
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.back().name, "prefetch");
  EXPECT_TRUE(s.back().autotuned);
  EXPECT_GT(s.back().buffer_limit, 2) << "the consumer found the buffer empty ~59 times and it never grew";
}

TEST(Dataset, AutotuneRespectsTheRamBudget) {
  // 64 KiB elements, a 256 KiB budget: buffers never hold much more than the budget.
  Dataset d = Dataset::range(400)
                  .map([](Element) { return Element{Tensor::zeros({16384})}; }, {.num_parallel_calls = AUTOTUNE})
                  .prefetch(AUTOTUNE)
                  .with_options({.ram_budget = 256 << 10, .cpu_budget = 4});
  Iterator it = d.iterator();
  Element e;
  int64_t peak = 0;
  while (it.next(e)) {
    peak = std::max(peak, it.buffered_bytes());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  EXPECT_LE(peak, (256 << 10) + 9 * 65536);  // the budget, plus what the threads already computed
  EXPECT_EQ(it.buffered_bytes(), 0);
}

// Where an autotuned map settles (its parallelism at the consumer's rate) depends on timing: measured by
// bench/autotune.cpp (tk_bench_autotune), not asserted here.

TEST(Dataset, StatsNameEveryStage) {
  Iterator it = Dataset::range(10).map([](Element e) { return e; }).batch(2).prefetch(1).iterator();
  Element e;
  while (it.next(e)) {
  }
  std::vector<std::string> names;
  for (const StageStats& s : it.stats()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"range(0, 10)", "map", "batch", "prefetch"}));
  EXPECT_EQ(Dataset::range(10).map([](Element e) { return e; }).batch(2).prefetch(1).describe(),
            "range(0, 10) -> map -> batch(2) -> prefetch(1)");
}

TEST(Stall, VerdictThresholdsAreTensorFlowProfilers) {
  EXPECT_EQ(stall_verdict(0.049), "not input-bound");
  EXPECT_EQ(stall_verdict(0.05), "moderately input-bound");
  EXPECT_EQ(stall_verdict(0.199), "moderately input-bound");
  EXPECT_EQ(stall_verdict(0.2), "highly input-bound");
}

TEST(Stall, AdviceNamesTheSlowestStageAndWhatToChange) {
  std::vector<StageStats> stages(3);
  stages[0] = {.name = "tfrecord(a.tfrecord)", .elements = 1000, .work_seconds = 0.1};
  stages[1] = {.name = "augment", .kind = "map", .elements = 1000, .work_seconds = 4.0, .parallelism = 2};
  stages[2] = {.name = "batch", .kind = "batch", .elements = 10, .work_seconds = 0.05};
  const std::string a = stall_advice(stages, 0.3);
  EXPECT_NE(a.find("slowest stage: augment"), std::string::npos) << a;
  EXPECT_NE(a.find("num_parallel_calls (now 2)"), std::string::npos) << a;
  EXPECT_NE(a.find("prefetch(AUTOTUNE)"), std::string::npos) << a;
  EXPECT_EQ(stall_advice(stages, 0.01), "");
  stages[1].work_seconds = 0.01;
  EXPECT_NE(stall_advice(stages, 0.3).find("reading is the bottleneck"), std::string::npos);

  StallMeter m;
  for (int i = 0; i < 100; ++i) {
    m.add_wait(i == 99 ? 0.5 : 0.001);
    m.add_compute(0.01);
  }
  const StallReport r = m.report(stages);
  EXPECT_EQ(r.steps, 100);
  EXPECT_NEAR(r.wait_fraction, 0.599 / 1.599, 1e-9);
  EXPECT_NEAR(r.p50_wait_ms, 1.0, 1e-9);
  EXPECT_EQ(r.verdict, "highly input-bound");
  EXPECT_EQ(r.slowest_stage, "tfrecord(a.tfrecord)");
  EXPECT_NE(r.summary().find("input wait 37.5%"), std::string::npos) << r.summary();
}

TEST(Dataset, BadArgumentsAreClearErrors) {
  EXPECT_THROW(Dataset::range(3).batch(0), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).shuffle(0), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).prefetch(0), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).shard(2, 2), InvalidArgument);
  EXPECT_THROW(Dataset::range(3).map([](Element e) { return e; }, {.num_parallel_calls = -5}), InvalidArgument);
  EXPECT_THROW(Dataset::range(3, 4, 0), InvalidArgument);
  Iterator empty;
  Element e;
  EXPECT_THROW(empty.next(e), InvalidArgument);
}

// ---- regressions found in review

TEST(Dataset, InPlaceMapDuringTheFillingPassDoesNotChangeTheCache) {
  Dataset d = generated_range(5).cache();
  auto add = [](Element e) {
    *e[0].data<int64_t>() += 100;
    return e;
  };
  EXPECT_EQ(values(d.map(add)), iota(5, 100));  // fills the cache
  EXPECT_EQ(values(d.map(add)), iota(5, 100));  // replays it
  EXPECT_EQ(values(d), iota(5));
}

TEST(Dataset, ZipOfSameSeedShufflesStaysAligned) {
  Dataset z = Dataset::zip({Dataset::range(50).shuffle(50, 42), Dataset::range(50).shuffle(50, 42)});
  for (int pass = 0; pass < 2; ++pass) {
    Iterator it = z.iterator();
    Element e;
    while (it.next(e)) EXPECT_EQ(scalar(e[0]), scalar(e[1]));
  }
}

TEST(Dataset, FiniteRepeatGoesOnAfterAnEmptyPass) {
  auto calls = std::make_shared<int>(0);
  Dataset d = Dataset::from_generator([calls] {
    const bool empty = (*calls)++ == 1;  // the second pass is empty
    auto i = std::make_shared<int64_t>(0);
    return Dataset::Generator([empty, i](Element& e) {
      if (empty || *i >= 2) return false;
      e.assign(1, i64_scalar((*i)++));
      return true;
    });
  });
  EXPECT_EQ(values(d.repeat(3)), (std::vector<int64_t>{0, 1, 0, 1}));
}

TEST(Dataset, CancelledParallelInterleaveOpensNoMoreInputs) {
  auto opened = std::make_shared<std::atomic<int>>(0);
  {
    Dataset d = Dataset::range(200)
                    .interleave(
                        [opened](const Element&) {
                          ++*opened;
                          return Dataset::range(3);
                        },
                        {.cycle_length = 2, .num_parallel_calls = 2})
                    .prefetch(1);
    Iterator it = d.iterator();
    Element e;
    ASSERT_TRUE(it.next(e));
  }
  EXPECT_LT(opened->load(), 20);
}

TEST(Dataset, StatsAccumulateOverRepeatedPasses) {
  Iterator it = Dataset::range(2).map([](Element e) { return e; }).repeat(100).iterator();
  Element e;
  int n = 0;
  while (it.next(e)) ++n;
  EXPECT_EQ(n, 200);
  const std::vector<StageStats> s = it.stats();
  EXPECT_LE(s.size(), 3u);  // range, map, repeat: one entry each, not one per pass
  for (const StageStats& st : s)
    if (st.kind == "map") EXPECT_EQ(st.elements, 200);
}

TEST(Dataset, PrefetchAutotuneStaysWithinTheRamBudget) {
  // 64 KiB elements, a 1 MiB budget, a fast producer and a consumer that pauses: buffers stay near the budget.
  Dataset d = Dataset::range(300)
                  .map([](Element) { return Element{Tensor::zeros({16384})}; })
                  .prefetch(AUTOTUNE)
                  .with_options({.ram_budget = 1 << 20});
  Iterator it = d.iterator();
  Element e;
  int64_t peak = 0;
  for (int i = 0; it.next(e); ++i) {
    if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    peak = std::max(peak, it.buffered_bytes());
  }
  EXPECT_LE(peak, (1 << 20) + 65536);
}

}  // namespace
}  // namespace tk::data
