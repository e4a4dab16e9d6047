// The pipeline over real files: the same 400 rows written as CSV (Python csv), NPZ (NumPy), HDF5 (h5py)
// and TFRecord (TensorFlow) by tests/fixtures/data/cli/gen_cli_fixtures.py read back identically through
// every reader, also when all four are read at once on parallel threads (this test runs under
// ThreadSanitizer in CI; HDF5 calls are serialized by the reader).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainkit/data/csv.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/hdf5.h"
#include "trainkit/data/npy.h"
#include "trainkit/data/tfrecord.h"

namespace tk::data {
namespace {

std::string fixture(const std::string& name) { return std::string(TK_SOURCE_DIR) + "/tests/fixtures/data/cli/" + name; }

// (x float32 (4,), y int64 ()) from each format.
Dataset rows(const std::string& format) {
  if (format == "npz")
    return Dataset::from_tensor_slices({load_npz(fixture("train.npz"), "x"), load_npz(fixture("train.npz"), "y")});
  if (format == "h5") return Dataset::from_reader([] { return open_hdf5(fixture("train.h5"), {"x", "y"}); }, "hdf5");
  if (format == "tfrecord")
    return Dataset::from_reader(
        [] {
          return open_tfrecord(fixture("train.tfrecord"),
                               {{"x", DType::f32, Shape({4})}, {"y", DType::i64, Shape(std::vector<int64_t>{})}});
        },
        "tfrecord");
  CsvOptions o;
  o.columns = {{"label", DType::i64, std::nullopt}};
  return Dataset::from_reader([o] { return open_csv(fixture("train.csv"), o); }, "csv").map([](Element e) {
    Tensor x(Shape({4}), DType::f32);
    for (int i = 0; i < 4; ++i) x.data<float>()[i] = e[static_cast<size_t>(i)].data<float>()[0];
    return Element{x, e[4]};
  });
}

// Flattened (x0..x3, y) per row of one pass.
std::vector<double> flatten(const Dataset& d) {
  std::vector<double> out;
  Iterator it = d.iterator();
  Element e;
  while (it.next(e)) {
    const int64_t n = e[0].shape().rank() == 2 ? e[0].dim(0) : 1;
    for (int64_t r = 0; r < n; ++r) {
      for (int k = 0; k < 4; ++k) out.push_back(e[0].data<float>()[r * 4 + k]);
      out.push_back(static_cast<double>(e[1].data<int64_t>()[r]));
    }
  }
  return out;
}

TEST(PipelineFiles, EveryFormatYieldsTheSameRows) {
  const std::vector<double> ref = flatten(rows("npz"));
  ASSERT_EQ(ref.size(), 400u * 5);
  for (const char* f : {"h5", "tfrecord", "csv"}) EXPECT_EQ(flatten(rows(f)), ref) << f;
}

TEST(PipelineFiles, ParallelInterleaveOfAllFormatsIsDeterministic) {
  const std::vector<std::string> formats{"npz", "h5", "tfrecord", "csv"};
  auto pipeline = [&](int64_t parallel) {
    return Dataset::range(4)
        .interleave([&](const Element& e) { return rows(formats[static_cast<size_t>(e[0].data<int64_t>()[0])]); },
                    {.cycle_length = 4, .block_length = 7, .num_parallel_calls = parallel})
        .map([](Element e) { return e; }, {.num_parallel_calls = parallel == 0 ? 0 : AUTOTUNE})
        .shuffle(64, 5)
        .batch(32)
        .prefetch(AUTOTUNE);
  };
  const std::vector<double> sequential = flatten(pipeline(0));
  EXPECT_EQ(sequential.size(), 4u * 400 * 5);
  EXPECT_EQ(flatten(pipeline(4)), sequential);
  EXPECT_EQ(flatten(pipeline(AUTOTUNE)), sequential);
}

}  // namespace
}  // namespace tk::data
