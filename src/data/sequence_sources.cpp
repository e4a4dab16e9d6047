// Sources for sequence models: byte-level text (from_text_file) and keras.utils.timeseries_dataset_from_array.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::data {

Dataset Dataset::from_text_file(const std::string& path, int64_t sequence_length, int64_t sequence_stride) {
  const std::string op = "Dataset::from_text_file('" + path + "')";
  if (sequence_length <= 0)
    throw InvalidArgument(op + ": sequence_length must be positive, got " + std::to_string(sequence_length));
  if (sequence_stride < 0)
    throw InvalidArgument(op + ": sequence_stride must be positive (0: sequence_length), got " +
                          std::to_string(sequence_stride));
  const int64_t stride = sequence_stride == 0 ? sequence_length : sequence_stride;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(op + ": cannot open the file (" + std::strerror(errno) + ")");
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InvalidArgument(op + ": reading the file failed");
  const auto n = static_cast<int64_t>(bytes.size());
  if (n == 0)
    throw InvalidArgument(op + ": the file is empty; byte-level sequences need at least sequence_length + 1 bytes");
  if (n < sequence_length + 1)
    throw InvalidArgument(
        op + ": the file has " + std::to_string(n) + " bytes but sequence_length " + std::to_string(sequence_length) +
        " needs at least " + std::to_string(sequence_length + 1) +
        " (x = bytes[t, t+T), y = bytes[t+1, t+T+1)); use a shorter sequence_length or a longer file");
  // Sequences s = 0, stride, ... while s + T + 1 <= n.
  const int64_t count = (n - sequence_length - 1) / stride + 1;
  Tensor x(Shape({count, sequence_length}), DType::i32, Device::cpu(), "dataset/text_x");  // (count, T)
  Tensor y(Shape({count, sequence_length}), DType::i32, Device::cpu(), "dataset/text_y");  // (count, T)
  int32_t* px = x.data<int32_t>();
  int32_t* py = y.data<int32_t>();
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (int64_t i = 0; i < count; ++i)
    for (int64_t t = 0; t < sequence_length; ++t) {
      px[i * sequence_length + t] = b[i * stride + t];
      py[i * sequence_length + t] = b[i * stride + t + 1];
    }
  return Dataset(make_slices_node({x, y}, "from_text_file(" + path + ")"));
}

Dataset timeseries_dataset_from_array(const Tensor& data, const Tensor& targets, int64_t sequence_length,
                                      TimeseriesOptions o) {
  const std::string op = "timeseries_dataset_from_array";
  const auto fail = [&](const std::string& m) { throw InvalidArgument(op + ": " + m); };
  if (!data.defined() || data.shape().rank() == 0) fail("data must have a time dimension (rows), got a scalar");
  if (!data.on_host()) fail("data must be in host memory");
  const int64_t rows = data.dim(0);
  if (sequence_length <= 0) fail("sequence_length must be positive, got " + std::to_string(sequence_length));
  if (o.sequence_stride <= 0) fail("sequence_stride must be positive, got " + std::to_string(o.sequence_stride));
  if (o.sampling_rate <= 0) fail("sampling_rate must be positive, got " + std::to_string(o.sampling_rate));
  if (o.batch_size <= 0) fail("batch_size must be positive, got " + std::to_string(o.batch_size));
  if (o.start_index < 0 || (o.start_index > 0 && o.start_index >= rows))
    fail("start_index must be in [0, len(data)=" + std::to_string(rows) + "), got " + std::to_string(o.start_index));
  const int64_t end = o.end_index < 0 ? rows : o.end_index;
  if (o.end_index >= 0 && (o.end_index <= o.start_index || o.end_index > rows))
    fail("end_index must be in (start_index=" + std::to_string(o.start_index) + ", len(data)=" + std::to_string(rows) +
         "], got " + std::to_string(o.end_index));
  // Keras: num_seqs = end - start - (sequence_length - 1) * sampling_rate, capped by len(targets).
  int64_t num = end - o.start_index - (sequence_length - 1) * o.sampling_rate;
  const bool with_targets = targets.defined();
  if (with_targets) {
    if (targets.shape().rank() == 0) fail("targets must have one row per data row, got a scalar");
    if (!targets.on_host()) fail("targets must be in host memory");
    if (targets.dim(0) != rows)
      fail("targets has " + std::to_string(targets.dim(0)) + " rows but data has " + std::to_string(rows) +
           "; Keras needs len(targets) == len(data)");
    num = std::min(num, targets.dim(0));
  }
  if (num <= 0) num = 0;
  auto starts = std::make_shared<std::vector<int64_t>>();
  for (int64_t s = 0; s < num; s += o.sequence_stride) starts->push_back(s);
  const int64_t begin = o.start_index, rate = o.sampling_rate, T = sequence_length;
  Dataset d = Dataset::range(static_cast<int64_t>(starts->size()));
  if (o.shuffle) d = d.shuffle(std::max<int64_t>(1, static_cast<int64_t>(starts->size())), o.seed);
  d = d.map([data, targets, with_targets, starts, begin, rate, T](Element e) {
    const int64_t s = (*starts)[static_cast<size_t>(*e[0].data<int64_t>())];
    const size_t row = data.nbytes() / static_cast<size_t>(data.dim(0));
    std::vector<int64_t> dims{T};
    for (int k = 1; k < data.shape().rank(); ++k) dims.push_back(data.dim(k));
    Tensor w(Shape(dims), data.dtype(), Device::cpu(), "dataset/timeseries");  // (T, features...)
    for (int64_t j = 0; j < T; ++j)
      std::memcpy(static_cast<char*>(w.raw()) + static_cast<size_t>(j) * row,
                  static_cast<const char*>(data.raw()) + static_cast<size_t>(begin + s + j * rate) * row, row);
    Element out{w};
    if (with_targets) {
      // Keras slices targets from start_index too: the target of a window starting at s is targets[start + s].
      const size_t trow = targets.nbytes() / static_cast<size_t>(targets.dim(0));
      Tensor t(targets.shape().sample_shape(), targets.dtype(), Device::cpu(), "dataset/timeseries_target");
      std::memcpy(t.raw(), static_cast<const char*>(targets.raw()) + static_cast<size_t>(begin + s) * trow, trow);
      out.push_back(std::move(t));
    }
    return out;
  });
  return d.batch(o.batch_size);
}

}  // namespace tk::data
