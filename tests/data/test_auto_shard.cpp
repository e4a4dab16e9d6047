// One worker's share of a batched pipeline (src/data/auto_shard.h): the workers' batches, put side by side, are the
// global batches of the pipeline read whole; each worker's map sees only its rows; what cannot be cut says why.
#include <gtest/gtest.h>

#include <atomic>

#include "data/auto_shard.h"
#include "data/node.h"
#include "nn/distribute/batch_split.h"
#include "trainkit/core/error.h"

namespace tk::data {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

std::vector<int64_t> values(const Element& e) {
  const Tensor& t = e[0];
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.dim(0); ++i)
    v.push_back(t.dtype() == DType::i64 ? t.data<int64_t>()[i] : static_cast<int64_t>(t.data<float>()[i]));
  return v;
}

Batches read_all(const Dataset& d, std::vector<int64_t>* sizes = nullptr,
                 const std::shared_ptr<GlobalBatchSizes>& global = nullptr) {
  Batches out;
  Iterator it = d.iterator();
  Element e;
  while (it.next(e)) {
    out.push_back(values(e));
    if (sizes) sizes->push_back(global->pop());
  }
  return out;
}

RowsOf rows_of(int64_t rank, int64_t ranks) {
  return [rank, ranks](int64_t window) {
    const nn::distribute::Shard s = nn::distribute::rank_shard(rank, ranks, window);
    return WorkerRows{s.first, s.rows};
  };
}

// Every worker's batches, joined in rank order (a worker without rows of a short batch adds nothing), must be the
// global batches; every worker gets one batch per global batch and knows its size.
void expect_split(const Dataset& d, int64_t ranks) {
  SCOPED_TRACE(d.describe() + " over " + std::to_string(ranks) + " workers");
  const Batches whole = read_all(d);
  std::vector<Batches> parts;
  std::vector<std::vector<int64_t>> sizes(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) {
    std::string why;
    const std::optional<WorkerShare> share = share_of_batches(d, rows_of(r, ranks), why);
    ASSERT_TRUE(share) << why;
    if (d.cardinality() >= 0) {
      EXPECT_EQ(share->dataset.cardinality(), d.cardinality());
    }
    parts.push_back(read_all(share->dataset, &sizes[static_cast<size_t>(r)], share->global_batches));
    ASSERT_EQ(parts.back().size(), whole.size()) << "worker " << r << " runs another number of steps";
  }
  for (size_t k = 0; k < whole.size(); ++k) {
    std::vector<int64_t> joined;
    const auto b = static_cast<int64_t>(whole[k].size());
    for (int64_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(sizes[static_cast<size_t>(r)][k], b) << "worker " << r << ", batch " << k;
      if (r < std::min(ranks, b)) {
        const std::vector<int64_t>& p = parts[static_cast<size_t>(r)][k];
        joined.insert(joined.end(), p.begin(), p.end());
      } else {
        EXPECT_EQ(parts[static_cast<size_t>(r)][k], std::vector<int64_t>{whole[k][0]}) << "a rowless worker's stand-in";
      }
    }
    EXPECT_EQ(joined, whole[k]) << "batch " << k;
  }
}

TEST(AutoShard, WorkersBatchesJoinToTheGlobalBatches) {
  const Dataset shuffled = Dataset::range(23).shuffle(8, 5, false);  // random access: row indices are cut
  for (int64_t ranks : {2, 3}) {
    expect_split(shuffled.batch(5).prefetch(2), ranks);
    expect_split(shuffled.batch(5, true), ranks);      // the short last batch dropped on every worker
    expect_split(shuffled.batch(2), ranks);            // fewer rows than workers in every batch
    expect_split(shuffled.batch(7).repeat(2), ranks);  // a short batch at the end of each repetition
    expect_split(Dataset::range(30)
                     .filter([](const Element& e) { return *e[0].data<int64_t>() % 3 != 0; })
                     .map([](Element e) { return e; }, {.num_parallel_calls = 2})
                     .batch(4)
                     .with_options({.cpu_budget = 2}),
                 ranks);  // unknown cardinality, elements (not indices) cut below a parallel map
  }
}

TEST(AutoShard, EachWorkersMapDecodesOnlyItsRows) {
  for (int64_t ranks : {2, 3}) {
    int64_t total = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      auto decoded = std::make_shared<std::atomic<int64_t>>(0);
      const Dataset d = Dataset::range(100)
                            .shuffle(16, 3)
                            .map(
                                [decoded](Element e) {
                                  decoded->fetch_add(1);
                                  return e;
                                },
                                {.num_parallel_calls = AUTOTUNE})
                            .batch(10);
      std::string why;
      const std::optional<WorkerShare> share = share_of_batches(d, rows_of(r, ranks), why);
      ASSERT_TRUE(share) << why;
      EXPECT_NE(share->dataset.describe().find("shuffle(16) -> rows ["), std::string::npos)
          << share->dataset.describe();  // the cut comes before the map
      EXPECT_EQ(read_all(share->dataset).size(), 10u);
      const int64_t mine = 10 * (10 / ranks + (r < 10 % ranks ? 1 : 0));
      EXPECT_EQ(decoded->load(), mine) << "worker " << r << " of " << ranks;
      total += decoded->load();
    }
    EXPECT_EQ(total, 100);
  }
}

TEST(AutoShard, AMapWithAnRngRunsBeforeTheCut) {
  auto decoded = std::make_shared<std::atomic<int64_t>>(0);
  const Dataset d = Dataset::range(20)
                        .map([decoded](Element e, Rng&) {
                          decoded->fetch_add(1);
                          return e;
                        })
                        .map([](Element e) { return e; })
                        .batch(4);
  std::string why;
  const std::optional<WorkerShare> share = share_of_batches(d, rows_of(1, 2), why);
  ASSERT_TRUE(share) << why;
  EXPECT_EQ(share->dataset.describe(), "range(0, 20) -> map -> rows [2, 4) of every 4 -> map -> batch(2)");
  read_all(share->dataset);
  EXPECT_EQ(decoded->load(), 20);  // its draws are keyed by the element's position in the whole stream
  expect_split(d, 2);
}

TEST(AutoShard, PipelinesThatCannotBeCutSayWhy) {
  const Dataset batches = Dataset::range(20).batch(4);
  auto why_not = [](const Dataset& d) {
    std::string why;
    EXPECT_FALSE(share_of_batches(d, rows_of(0, 2), why)) << d.describe();
    return why;
  };
  EXPECT_EQ(why_not(Dataset::range(8)), "the pipeline has no batch()");
  EXPECT_EQ(why_not(batches.filter([](const Element&) { return true; })), "'filter' comes after the last batch()");
  EXPECT_EQ(why_not(batches.unbatch()), "'unbatch' comes after the last batch()");
  EXPECT_EQ(why_not(batches.shuffle(4, 1)), "'shuffle(4)' comes after the last batch()");
  EXPECT_EQ(why_not(batches.map([](Element e, Rng&) { return e; })),
            "'map draws random numbers keyed by each element's position' comes after the last batch()");
  EXPECT_EQ(why_not(batches.map([](Element e) { return e; }, {.num_parallel_calls = 2, .deterministic = false})),
            "'map(2) is not deterministic (it may reorder elements)' comes after the last batch()");
}

TEST(AutoShard, OptionsMergeOutermostFirst) {
  const Dataset d = Dataset::range(4)
                        .with_options({.ram_budget = 1 << 20})
                        .batch(2)
                        .with_options({.auto_shard_policy = AutoShardPolicy::OFF});
  const Options o = pipeline_options(*d.node());
  EXPECT_EQ(o.ram_budget, size_t{1} << 20);  // an outer with_options no longer hides an inner budget
  EXPECT_EQ(o.auto_shard_policy, AutoShardPolicy::OFF);
}

}  // namespace
}  // namespace tk::data
