// A device-resident Dataset's host logic, without a GPU: the index pipeline (data/device_batches.h) yields the rows
// the user's pipeline yields, batch for batch and pass for pass; the stages it refuses; the device gather's plan
// (backends/cuda/device_gather_plan.h); the errors for a model on another device (nn/training/device_dataset.h).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>

#include "backends/cuda/device_gather_plan.h"
#include "data/device_batches.h"
#include "data/node.h"
#include "nn/training/device_dataset.h"
#include "trainkit/trainkit.h"

namespace {
using tk::DType;
using tk::Tensor;
using tk::data::Dataset;
using tk::data::Element;

Tensor counting(tk::Shape shape, DType dtype) {
  Tensor t(std::move(shape), dtype);
  auto* b = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 3);
  return t;
}

// The rows idx of `a`, stacked (the host's view of what the device gather writes).
Tensor rows_of(const Tensor& a, const int64_t* idx, int64_t n) {
  Tensor t(a.shape().with_batch(n), a.dtype());
  const size_t row = a.nbytes() / static_cast<size_t>(a.dim(0));
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(t.raw()) + static_cast<size_t>(i) * row,
                static_cast<const char*>(a.raw()) + static_cast<size_t>(idx[i]) * row, row);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Every batch of passes 0..passes-1 of `user` equals the rows its index pipeline names.
void expect_same_batches(const Dataset& user, int passes = 2) {
  std::string blocker;
  const std::optional<tk::data::DeviceBatches> b = tk::data::index_pipeline(user, blocker);
  ASSERT_TRUE(b) << "blocked by " << blocker;
  EXPECT_EQ(b->indices.cardinality(), user.cardinality()) << user.describe();
  for (int pass = 0; pass < passes; ++pass) {
    tk::data::Iterator a = tk::data::make_iterator(user, static_cast<uint64_t>(pass));
    tk::data::Iterator i = tk::data::make_iterator(b->indices, static_cast<uint64_t>(pass));
    Element ea, ei;
    int64_t batches = 0;
    while (a.next(ea)) {
      ASSERT_TRUE(i.next(ei)) << "the index pipeline ends early, pass " << pass << " batch " << batches;
      ASSERT_EQ(ei.size(), 1u);
      ASSERT_EQ(ei[0].dtype(), DType::i64);
      ASSERT_EQ(ea.size(), b->arrays.size());
      for (size_t c = 0; c < ea.size(); ++c)
        EXPECT_TRUE(same_bytes(ea[c], rows_of(b->arrays[c], ei[0].data<int64_t>(), ei[0].dim(0))))
            << user.describe() << " pass " << pass << " batch " << batches << " component " << c;
      ++batches;
    }
    EXPECT_FALSE(i.next(ei)) << "the index pipeline has more batches, pass " << pass;
    EXPECT_GT(batches, 0);
  }
}

TEST(DeviceBatches, TheIndexPipelineYieldsTheUsersRowsBatchForBatch) {
  const Tensor x = counting({50, 3}, DType::f32), y = counting({50}, DType::i32);
  const Dataset d = Dataset::from_tensor_slices({x, y});
  expect_same_batches(d.batch(8));
  expect_same_batches(d.shuffle(16, 7).batch(8).prefetch(2));
  expect_same_batches(d.shuffle(50, 3, true).batch(7, true).repeat(2));
  expect_same_batches(d.skip(5).take(30).shard(3, 1).shuffle(4, 9).batch(4));
  expect_same_batches(d.shuffle(10, 1).batch(6).with_options({.cpu_budget = 2}).prefetch(tk::data::AUTOTUNE));
  expect_same_batches(tk::data::Dataset::on_device({x, y}, tk::Device::cpu()).shuffle(20, 4).batch(16));
}

TEST(DeviceBatches, StagesThatNeedTheValuesStopTheRewrite) {
  const Dataset d = Dataset::from_tensor_slices({counting({10, 2}, DType::f32)});
  std::string blocker;
  EXPECT_FALSE(tk::data::index_pipeline(d.map([](Element e) { return e; }).batch(2), blocker));
  EXPECT_EQ(blocker, "map");
  EXPECT_FALSE(tk::data::index_pipeline(d.filter([](const Element&) { return true; }).batch(2), blocker));
  EXPECT_EQ(blocker, "filter");
  EXPECT_FALSE(tk::data::index_pipeline(d.batch(2).unbatch().batch(3), blocker));
  EXPECT_FALSE(tk::data::index_pipeline(Dataset::range(5).batch(2), blocker)) << "range has no arrays";
  // Host arrays: fit keeps the ordinary pipeline.
  EXPECT_FALSE(tk::data::device_batches(d.map([](Element e) { return e; }).batch(2), "fit"));
  EXPECT_FALSE(tk::data::device_batches(d.batch(2), "fit"));
}

TEST(DeviceBatches, IndexRunsAndContiguity) {
  using tk::cuda::IndexRun;
  const int64_t shuffled[] = {4, 5, 6, 1, 2, 9};
  EXPECT_EQ(tk::cuda::index_runs(shuffled, 0, 6), (std::vector<IndexRun>{{4, 3}, {1, 2}, {9, 1}}));
  EXPECT_EQ(tk::cuda::index_runs(nullptr, 10, 5), (std::vector<IndexRun>{{10, 5}}));
  EXPECT_TRUE(tk::cuda::index_runs(shuffled, 0, 0).empty());
  EXPECT_EQ(tk::cuda::contiguous_first(shuffled, 0, 3), 4);
  EXPECT_EQ(tk::cuda::contiguous_first(shuffled, 0, 4), -1);
  EXPECT_EQ(tk::cuda::contiguous_first(nullptr, 12, 8), 12);
  const int64_t down[] = {3, 2};
  EXPECT_EQ(tk::cuda::contiguous_first(down, 0, 2), -1) << "rows taken backwards are not a run";
}

TEST(DeviceBatches, TheDeviceGatherPlan) {
  using Kind = tk::cuda::GatherPlan::Kind;
  std::vector<int64_t> in_order(64), shuffled(64);
  std::iota(in_order.begin(), in_order.end(), 128);
  for (int64_t i = 0; i < 64; ++i) shuffled[static_cast<size_t>(i)] = (i * 37) % 64;
  // Same dtype, unscaled: a device-to-device copy per run.
  tk::cuda::GatherPlan p = tk::cuda::plan_device_gather(DType::f32, DType::f32, 1, 0, in_order.data(), 0, 64);
  EXPECT_EQ(p.kind, Kind::copy);
  EXPECT_EQ(p.runs, (std::vector<tk::cuda::IndexRun>{{128, 64}}));
  p = tk::cuda::plan_device_gather(DType::i32, DType::i32, 1, 0, nullptr, 64, 32);
  EXPECT_EQ(p.kind, Kind::copy);
  // Shuffled: the kernel, reading the rows from the device.
  p = tk::cuda::plan_device_gather(DType::f32, DType::f32, 1, 0, shuffled.data(), 0, 64);
  EXPECT_EQ(p.kind, Kind::kernel);
  EXPECT_TRUE(p.indexed);
  EXPECT_FALSE(p.scaled);
  // uint8 pixels with a fused Rescaling, in order: the kernel from the first row, scaling.
  p = tk::cuda::plan_device_gather(DType::u8, DType::f32, 1.0f / 255, 0, in_order.data(), 0, 64);
  EXPECT_EQ(p.kind, Kind::kernel);
  EXPECT_FALSE(p.indexed);
  EXPECT_EQ(p.first, 128);
  EXPECT_TRUE(p.scaled);
  // A scale into an integer dtype does not apply (as on the host), so int32 -> int32 stays a copy.
  p = tk::cuda::plan_device_gather(DType::i32, DType::i32, 2, 1, nullptr, 0, 8);
  EXPECT_EQ(p.kind, Kind::copy);
  EXPECT_FALSE(p.scaled);
  // More runs than kMaxCopyRuns: one kernel instead of many small copies.
  const int64_t five_runs[] = {0, 2, 4, 6, 8};
  EXPECT_EQ(tk::cuda::plan_device_gather(DType::f32, DType::f32, 1, 0, five_runs, 0, 5).kind, Kind::kernel);
  const int64_t four_runs[] = {0, 2, 4, 6};
  EXPECT_EQ(tk::cuda::plan_device_gather(DType::f32, DType::f32, 1, 0, four_runs, 0, 4).runs.size(), 4u);
  // bool -> bool shuffled: the kernel, which moves the bytes as they are (the host memcpys them).
  p = tk::cuda::plan_device_gather(DType::boolean, DType::boolean, 1, 0, shuffled.data(), 0, 64);
  EXPECT_EQ(p.kind, Kind::kernel);
  EXPECT_FALSE(p.scaled);
}

TEST(DeviceBatches, AModelElsewhereIsToldWhatToDo) {
  const tk::Device gpu0 = tk::Device::cuda(0), gpu1 = tk::Device::cuda(1);
  std::string m = tk::nn::device_dataset_mismatch(gpu0, tk::Device::cpu(), false, "fit");
  EXPECT_NE(m.find("fit: the dataset's arrays are held on cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("model.set_device(cuda:0)"), std::string::npos) << m;
  m = tk::nn::device_dataset_mismatch(gpu0, gpu1, false, "evaluate");
  EXPECT_NE(m.find("Dataset::on_device(arrays, cuda:1)"), std::string::npos) << m;
  m = tk::nn::device_dataset_mismatch(gpu0, gpu0, true, "fit");
  EXPECT_NE(m.find("distribution strategy"), std::string::npos) << m;
  EXPECT_EQ(tk::nn::device_dataset_mismatch(gpu0, gpu0, false, "fit"), "");
}

TEST(DeviceBatches, ABatchIsBoundAsTheArraysAndItsRows) {
  const Tensor x = counting({12, 4}, DType::u8), y = counting({12}, DType::i32);
  std::string blocker;
  std::optional<tk::data::DeviceBatches> b =
      tk::data::index_pipeline(Dataset::from_tensor_slices({x, y}).shuffle(12, 2).batch(5), blocker);
  ASSERT_TRUE(b);
  const tk::nn::DeviceDataset d(std::move(*b));
  std::vector<Tensor> sx, sy;
  d.stand_ins(1, 1, true, sx, sy, "fit");
  ASSERT_EQ(sx.size(), 1u);
  ASSERT_EQ(sy.size(), 1u);
  EXPECT_EQ(sx[0].shape(), tk::Shape({1, 4}));
  EXPECT_EQ(sx[0].dtype(), DType::u8);
  EXPECT_EQ(sy[0].dtype(), DType::i32);
  EXPECT_THROW(d.stand_ins(2, 1, true, sx, sy, "fit"), tk::InvalidArgument) << "3 arrays wanted, 2 held";
  tk::data::Iterator it = d.indices().iterator();
  Element e;
  ASSERT_TRUE(it.next(e));
  const int64_t* rows = nullptr;
  std::vector<Tensor> x_, y_;
  EXPECT_EQ(d.split(e, 1, x_, y_, true, rows), 5);
  EXPECT_EQ(x_[0].raw(), x.raw()) << "the source's array itself";
  EXPECT_EQ(x_[0].dim(0), 12) << "the whole array, the rows separately";
  EXPECT_EQ(rows, e[0].data<int64_t>());
  Element scalar{Tensor(tk::Shape(std::vector<int64_t>{}), DType::i64)};
  EXPECT_THROW(d.split(scalar, 1, x_, y_, true, rows), tk::InvalidArgument) << "an unbatched pipeline";
  Element nested{Tensor(tk::Shape({2, 3}), DType::i64)};
  try {
    d.split(nested, 1, x_, y_, true, rows);
    FAIL() << "a pipeline batched twice";
  } catch (const tk::InvalidArgument& ex) {
    EXPECT_NE(std::string(ex.what()).find("batch(...).batch(...)"), std::string::npos) << ex.what();
  }
}

}  // namespace

namespace {

// fit -> evaluate(steps=k) -> predict -> fit, numbered as Model's fit (the user's counter, every pass) and evaluate /
// predict (nn::evaluation_pass) number them, over `run` (the host pipeline or the index pipeline) of the user's
// dataset `user`. Returns the rows each pass read, pass after pass. Host pipelines give their rows as values
// (x = 0..N-1), index pipelines as row numbers: the two must agree.
std::vector<std::vector<int64_t>> fit_evaluate_fit(const Dataset& user, const Dataset& run, int64_t k) {
  std::vector<std::vector<int64_t>> passes;
  auto read = [&](tk::data::Iterator it, int64_t steps) {
    std::vector<int64_t> rows;
    Element e;
    for (int64_t s = 0; (steps == 0 || s < steps) && it.next(e); ++s)
      for (int64_t i = 0; i < e[0].dim(0); ++i) rows.push_back(e[0].data<int64_t>()[i]);
    passes.push_back(std::move(rows));
  };
  const Dataset staged = tk::nn::staged(run);
  auto fit_pass = [&] { read(tk::data::make_iterator(staged, user.node()->passes.fetch_add(1)), 0); };
  fit_pass();
  read(tk::nn::evaluation_pass(user, staged), k);  // validation_steps / evaluate(steps = k)
  read(tk::nn::evaluation_pass(user, staged), 0);  // predict
  fit_pass();
  return passes;
}

TEST(DeviceBatches, EvaluateAndPredictNumberTheirPassesAsTheHostPathDoes) {
  constexpr int64_t kRows = 37;
  Tensor x(tk::Shape({kRows}), DType::i64);
  std::iota(x.data<int64_t>(), x.data<int64_t>() + kRows, int64_t{0});
  for (const bool ends_with_prefetch : {true, false}) {
    auto make = [&] {
      Dataset d = Dataset::from_tensor_slices({x}).shuffle(kRows, 11, /*reshuffle_each_iteration=*/true).batch(8);
      return ends_with_prefetch ? d.prefetch(2) : d;
    };
    const Dataset host = make(), user = make();  // the same pipeline twice: each counts its own passes
    std::string blocker;
    std::optional<tk::data::DeviceBatches> b = tk::data::index_pipeline(user, blocker);
    ASSERT_TRUE(b) << blocker;
    const auto want = fit_evaluate_fit(host, host, 2);
    const auto got = fit_evaluate_fit(user, b->indices, 2);
    EXPECT_EQ(got, want) << "ends with prefetch: " << ends_with_prefetch;
    EXPECT_EQ(user.node()->passes.load(), host.node()->passes.load()) << "the user's counter advances alike";
    EXPECT_EQ(want[1].size(), 16u) << "evaluate read 2 steps";
    EXPECT_NE(want[0], want[3]) << "the second fit reshuffles";
    if (ends_with_prefetch)
      EXPECT_EQ(host.node()->passes.load(), 4u) << "every pass took the user's next number";
    else
      EXPECT_EQ(host.node()->passes.load(), 2u) << "evaluate / predict ran a new prefetch's pass 0";
  }
}

}  // namespace
