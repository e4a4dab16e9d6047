// Event files: tensorflow.Event records (tensorflow/core/util/event.proto) in TFRecord framing.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "data/formats/crc32c.h"
#include "io/proto_writer.h"
#include "trainkit/core/error.h"
#include "trainkit/io/tensorboard.h"

namespace tk::io {
namespace {

// Field numbers: Event{wall_time 1, step 2, file_version 3, summary 5}; Summary{value 1};
// Summary.Value{tag 1, simple_value 2, histo 5}; HistogramProto{min 1, max 2, num 3, sum 4, sum_squares 5,
// bucket_limit 6, bucket 7}.
double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

proto::Message event_head(double wall_time, int64_t step) {
  proto::Message e;
  e.f64(1, wall_time < 0 ? now_seconds() : wall_time);
  if (step != 0) e.i64(2, step);  // proto3: a default value is not written
  return e;
}

std::string summary_event(double wall_time, int64_t step, const proto::Message& value) {
  proto::Message summary;
  summary.msg(1, value);
  return event_head(wall_time, step).msg(5, summary).bytes();
}

std::string error_text() { return std::strerror(errno); }

}  // namespace

std::string file_version_event(double wall_time) { return event_head(wall_time, 0).str(3, "brain.Event:2").bytes(); }

std::string scalar_event(std::string_view tag, float value, int64_t step, double wall_time) {
  proto::Message v;
  v.str(1, tag).f32(2, value);
  return summary_event(wall_time, step, v);
}

EventFileWriter::EventFileWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("TensorBoard: cannot create the log folder " + dir.string() + ": " + ec.message());
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  static std::atomic<int> counter{0};
  // tf.summary.create_file_writer's name: events.out.tfevents.<time>.<host>.<pid>.<uid>.v2
  const long long seconds = static_cast<long long>(now_seconds());
  path_ = dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(getpid()) + "." +
                 std::to_string(counter++) + ".v2");
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw IoError("TensorBoard: cannot create the event file " + path_.string() + ": " + error_text());
  write_record(file_version_event(-1));
  flush();
}

EventFileWriter::~EventFileWriter() {
  if (file_) std::fclose(file_);
}

void EventFileWriter::write_record(const std::string& event) {
  if (!file_) throw IoError("TensorBoard: event file " + path_.string() + " is closed");
  char head[12];
  const uint64_t n = event.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>(n >> (8 * i));
  const uint32_t len_crc = data::masked_crc32c(head, 8);
  const uint32_t data_crc = data::masked_crc32c(event.data(), event.size());
  for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<char>(len_crc >> (8 * i));
  char tail[4];
  for (int i = 0; i < 4; ++i) tail[i] = static_cast<char>(data_crc >> (8 * i));
  if (std::fwrite(head, 1, 12, file_) != 12 || std::fwrite(event.data(), 1, event.size(), file_) != event.size() ||
      std::fwrite(tail, 1, 4, file_) != 4)
    throw IoError("TensorBoard: cannot write to " + path_.string() + ": " + error_text());
}

void EventFileWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  write_record(scalar_event(tag, value, step, wall_time));
}

void EventFileWriter::add_histogram(std::string_view tag, const float* values, int64_t n, int64_t step, int buckets,
                                    double wall_time) {
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = values[i];
    lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
    sum_sq = std::fma(v, v, sum_sq);  // explicit: the same bytes whether or not the compiler may contract
  }
  if (n == 0) lo = hi = 0;
  const int k = hi > lo ? std::max(buckets, 1) : 1;
  // bucket_limit[i] is the right edge of bucket i (the left edge is the previous limit, min for the first).
  std::vector<double> limits(static_cast<size_t>(k)), counts(static_cast<size_t>(k), 0.0);
  const double width = (hi - lo) / k;
  for (int i = 0; i < k; ++i) limits[static_cast<size_t>(i)] = i + 1 == k ? hi : std::fma(width, i + 1, lo);
  for (int64_t i = 0; i < n; ++i) {
    int b = width > 0 ? static_cast<int>((values[i] - lo) / width) : 0;
    counts[static_cast<size_t>(std::clamp(b, 0, k - 1))] += 1;
  }
  proto::Message h;
  h.f64(1, lo).f64(2, hi).f64(3, static_cast<double>(n)).f64(4, sum).f64(5, sum_sq);
  h.packed_f64(6, limits).packed_f64(7, counts);
  proto::Message v;
  v.str(1, tag).msg(5, h);
  write_record(summary_event(wall_time, step, v));
}

void EventFileWriter::flush() {
  if (file_ && std::fflush(file_) != 0)
    throw IoError("TensorBoard: cannot write to " + path_.string() + ": " + error_text());
}

void EventFileWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0) throw IoError("TensorBoard: cannot close " + path_.string() + ": " + error_text());
}

}  // namespace tk::io
