// The TensorBoard callback's event files, re-read with trainkit's TFRecord reader (CRCs checked) and decoded
// here: Keras' run layout and tags, values equal to the History, and the committed accepted file
// (tests/fixtures/tensorboard/, checked with TensorBoard's EventAccumulator by check_tensorboard.py there)
// still written byte for byte, wall times aside. TK_WRITE_FIXTURES=1 rewrites the accepted files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "data/formats/protobuf_wire.h"
#include "trainkit/data/tfrecord.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {
namespace fs = std::filesystem;
using data::wire::Reader;
using data::wire::WireType;

struct Histo {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
};
struct Value {
  std::string tag;
  std::optional<float> simple;
  std::optional<Histo> histo;
};
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<Value> values;
};

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

std::vector<double> packed_doubles(std::string_view b) {
  std::vector<double> out(b.size() / 8);
  std::memcpy(out.data(), b.data(), out.size() * 8);
  return out;
}

Histo parse_histo(Reader r) {
  Histo h;
  uint32_t f;
  WireType t;
  while (r.next(f, t)) {
    if (f >= 1 && f <= 5 && t == WireType::fixed64) {
      const double v = as_double(r.fixed64());
      (f == 1 ? h.min : f == 2 ? h.max : f == 3 ? h.num : f == 4 ? h.sum : h.sum_squares) = v;
    } else if ((f == 6 || f == 7) && t == WireType::len) {
      (f == 6 ? h.limits : h.counts) = packed_doubles(r.len());
    } else {
      r.skip(f, t);
    }
  }
  return h;
}

Event parse_event(std::string_view rec) {
  Event e;
  Reader r(rec, 0, "Event", "tensorflow.Event");
  uint32_t f;
  WireType t;
  while (r.next(f, t)) {
    if (f == 1 && t == WireType::fixed64) {
      e.wall_time = as_double(r.fixed64());
    } else if (f == 2 && t == WireType::varint) {
      e.step = static_cast<int64_t>(r.varint());
    } else if (f == 3 && t == WireType::len) {
      e.file_version = std::string(r.len());
    } else if (f == 5 && t == WireType::len) {
      Reader s = r.sub(r.len(), "Summary");
      while (s.next(f, t)) {
        if (f != 1 || t != WireType::len) {
          s.skip(f, t);
          continue;
        }
        Reader v = s.sub(s.len(), "Summary.Value");
        Value val;
        while (v.next(f, t)) {
          if (f == 1 && t == WireType::len) {
            val.tag = std::string(v.len());
          } else if (f == 2 && t == WireType::fixed32) {
            const uint32_t bits = v.fixed32();
            float x;
            std::memcpy(&x, &bits, 4);
            val.simple = x;
          } else if (f == 5 && t == WireType::len) {
            val.histo = parse_histo(v.sub(v.len(), "HistogramProto"));
          } else {
            v.skip(f, t);
          }
        }
        e.values.push_back(val);
      }
    } else {
      r.skip(f, t);
    }
  }
  return e;
}

std::vector<std::string> read_records(const fs::path& file) {
  data::TFRecordReader reader(file.string(), /*check_crc=*/true);
  std::vector<std::string> out;
  for (std::string rec; reader.next(rec);) out.push_back(rec);
  return out;
}

fs::path only_event_file(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) files.push_back(entry.path());
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? fs::path{} : files[0];
}

// tag -> (step -> value)
std::map<std::string, std::map<int64_t, float>> scalars(const std::vector<std::string>& records) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const std::string& rec : records)
    for (const Value& v : parse_event(rec).values)
      if (v.simple) out[v.tag][parse_event(rec).step] = *v.simple;
  return out;
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("tk_tb_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

std::unique_ptr<Sequential> tiny_model() {
  clear_session();
  auto m = std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({4}), layers::Dense(8, "relu"), layers::Dense(3)});
  m->compile(optimizers::SGD({.learning_rate = 0.1f}), losses::SparseCategoricalCrossentropy({.from_logits = true}),
             {"accuracy"});
  return m;
}

std::pair<Tensor, Tensor> tiny_data(int64_t n) {
  Tensor x(Shape{n, 4}, DType::f32), y(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x.data<float>()[i * 4 + j] = static_cast<float>(((i * 7 + j * 3) % 11) - 5) / 5.0f;
    y.data<int32_t>()[i] = static_cast<int32_t>(i % 3);
  }
  return {x, y};
}

TEST(TensorBoard, FitWritesKerasRunsWhoseValuesEqualTheHistory) {
  const fs::path dir = fresh_dir("fit");
  utils::set_random_seed(7);
  auto model = tiny_model();
  auto [x, y] = tiny_data(40);
  auto tb = std::make_shared<callbacks::TensorBoard>(
      dir.string(), callbacks::TensorBoardOptions{.histogram_freq = 1, .update_freq = 2});
  History h =
      model->fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0, .callbacks = {tb}, .validation_split = 0.2f});

  const std::vector<std::string> train = read_records(only_event_file(dir / "train"));
  const std::vector<std::string> val = read_records(only_event_file(dir / "validation"));
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(parse_event(train[0]).file_version, "brain.Event:2");
  EXPECT_EQ(parse_event(val[0]).file_version, "brain.Event:2");
  EXPECT_GT(parse_event(train[0]).wall_time, 1.5e9);
  auto ts = scalars(train), vs = scalars(val);
  int checked = 0;
  for (const auto& [key, values] : h.history) {
    const bool is_val = key.rfind("val_", 0) == 0;
    const auto& run = is_val ? vs : ts;
    const std::string tag = "epoch_" + (is_val ? key.substr(4) : key);
    ASSERT_TRUE(run.count(tag)) << tag;
    ASSERT_EQ(run.at(tag).size(), values.size()) << tag;
    for (size_t e = 0; e < values.size(); ++e, ++checked)
      EXPECT_EQ(run.at(tag).at(static_cast<int64_t>(e)), static_cast<float>(values[e])) << tag << " epoch " << e;
  }
  EXPECT_EQ(checked, 4 * 3);  // loss, accuracy, val_loss, val_accuracy
  EXPECT_EQ(ts.at("epoch_learning_rate").at(2), 0.1f);
  EXPECT_GT(ts.at("epoch_memory_in_use_mib").at(0), 0.0f);
  EXPECT_GE(ts.at("epoch_memory_peak_mib").at(0), ts.at("epoch_memory_in_use_mib").at(0));
  // 32 training rows / 8 = 4 steps an epoch, 12 in all: batch scalars at global steps 2, 4, ..., 12.
  ASSERT_TRUE(ts.count("batch_loss"));
  EXPECT_EQ(ts.at("batch_loss").size(), 6u);
  EXPECT_EQ(ts.at("batch_loss").begin()->first, 2);
  EXPECT_EQ(ts.at("batch_loss").rbegin()->first, 12);
  // Histograms: every weight every epoch, counting every value.
  int histograms = 0;
  for (const std::string& rec : train)
    for (const Value& v : parse_event(rec).values)
      if (v.histo) {
        ++histograms;
        double counted = 0;
        for (double c : v.histo->counts) counted += c;
        EXPECT_EQ(counted, v.histo->num) << v.tag;
        EXPECT_EQ(v.histo->limits.size(), v.histo->counts.size()) << v.tag;
        EXPECT_EQ(v.histo->limits.back(), v.histo->max) << v.tag;
        if (v.tag == "dense/kernel/histogram") EXPECT_EQ(v.histo->num, 4 * 8);
      }
  EXPECT_EQ(histograms, 4 * 3);  // two kernels and two biases, three epochs

  // Another fit continues the global step where the optimizer is (12 steps done): batch scalars at 14 and 16.
  const fs::path more = fresh_dir("fit_more");
  model->fit(x, y,
             {.batch_size = 8,
              .epochs = 1,
              .verbose = 0,
              .callbacks = {std::make_shared<callbacks::TensorBoard>(more.string(),
                                                                     callbacks::TensorBoardOptions{.update_freq = 2})},
              .validation_split = 0.2f});
  const auto again = scalars(read_records(only_event_file(more / "train")));
  ASSERT_TRUE(again.count("batch_loss"));
  EXPECT_EQ(again.at("batch_loss").size(), 2u);
  EXPECT_EQ(again.at("batch_loss").begin()->first, 14);
  fs::remove_all(dir);
  fs::remove_all(more);
}

// Every value in `logs` order, as fit would call the callbacks: deterministic, so the bytes are too.
struct Scripted {
  History history;
  fs::path dir;
};

Scripted scripted_run(const fs::path& dir) {
  clear_session();
  Sequential model({layers::Input({3}), layers::Dense(2)});
  model.compile(optimizers::Adam({.learning_rate = 0.01f}),
                losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  model.set_weights({Tensor::from_vector<float>(Shape{3, 2}, {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f}),
                     Tensor::from_vector<float>(Shape{2}, {0.1f, -0.1f})});
  callbacks::TensorBoard tb(dir.string(), {.histogram_freq = 1, .update_freq = 3, .log_memory = false});
  Scripted s{{}, dir};
  for (Callback* cb : std::initializer_list<Callback*>{&s.history, &tb}) cb->model = &model;
  Logs logs;
  tb.on_train_begin(logs);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int64_t b = 0; b < 4; ++b) {
      // One rounding each (no multiply-add a compiler could fuse): the same bytes in every build.
      logs.set("loss", double(150 - 10 * epoch - b) / 100.0);
      logs.set("accuracy", double(25 + 5 * epoch + b) / 100.0);
      tb.on_train_batch_end(b, logs);
    }
    logs.set("val_loss", double(145 - 12 * epoch) / 100.0);
    logs.set("val_accuracy", double(30 + 4 * epoch) / 100.0);
    s.history.on_epoch_end(epoch, logs);
    tb.on_epoch_end(epoch, logs);
    logs.clear();
  }
  tb.on_train_end(logs);
  return s;
}

// Records with the wall time (always the first field: tag 0x09, 8 bytes) zeroed.
std::vector<std::string> without_wall_times(std::vector<std::string> records) {
  for (std::string& r : records) {
    EXPECT_GE(r.size(), 9u);
    EXPECT_EQ(r[0], '\x09');
    std::fill(r.begin() + 1, r.begin() + 9, '\0');
  }
  return records;
}

TEST(TensorBoard, AcceptedEventFilesAreStillWrittenByteForByte) {
  const fs::path dir = fresh_dir("accepted");
  const Scripted s = scripted_run(dir);
  const fs::path accepted = fs::path(TK_SOURCE_DIR) / "tests/fixtures/tensorboard/accepted";
  for (const char* run : {"train", "validation"}) {
    const fs::path mine = only_event_file(dir / run);
    if (std::getenv("TK_WRITE_FIXTURES")) {
      fs::create_directories(accepted / run);
      fs::copy_file(mine, accepted / run / "events.out.tfevents.accepted", fs::copy_options::overwrite_existing);
    }
    const auto want = without_wall_times(read_records(accepted / run / "events.out.tfevents.accepted"));
    const auto got = without_wall_times(read_records(mine));
    ASSERT_EQ(got.size(), want.size()) << run;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << run << " record " << i;
  }
  if (std::getenv("TK_WRITE_FIXTURES")) {  // the History check_tensorboard.py compares EventAccumulator's view to
    std::ofstream out(accepted.parent_path() / "history.json");
    out.precision(9);
    out << "{";
    bool first = true;
    for (const auto& [key, values] : s.history.history) {
      out << (first ? "" : ", ") << "\"" << key << "\": [";
      for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << static_cast<float>(values[i]);
      out << "]";
      first = false;
    }
    out << "}\n";
  }
  // The decoded view agrees with the History, too.
  auto ts = scalars(read_records(only_event_file(dir / "train")));
  for (size_t e = 0; e < 3; ++e)
    EXPECT_EQ(ts.at("epoch_loss").at(static_cast<int64_t>(e)), static_cast<float>(s.history.history.at("loss")[e]));
  EXPECT_EQ(ts.at("batch_loss").size(), 4u);  // global steps 3, 6, 9, 12
  fs::remove_all(dir);
}

TEST(TensorBoard, EventFileFramingIsTensorFlows) {
  // A record holds exactly the serialized Event, and the first one is file_version (what TensorBoard checks).
  const std::string e = io::file_version_event(1.0);
  EXPECT_EQ(e.substr(0, 1), "\x09");
  EXPECT_NE(e.find("brain.Event:2"), std::string::npos);
  const fs::path dir = fresh_dir("framing");
  {
    io::EventFileWriter w(dir);
    w.add_scalar("epoch_loss", 0.5f, 3, 2.0);
    w.close();
    const auto records = read_records(w.path());
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[1], io::scalar_event("epoch_loss", 0.5f, 3, 2.0));
    const Event ev = parse_event(records[1]);
    EXPECT_EQ(ev.step, 3);
    EXPECT_EQ(ev.wall_time, 2.0);
    ASSERT_EQ(ev.values.size(), 1u);
    EXPECT_EQ(ev.values[0].tag, "epoch_loss");
    EXPECT_EQ(*ev.values[0].simple, 0.5f);
    // A flipped byte is caught by the CRC.
    std::string bytes;
    {
      std::ifstream in(w.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() - 6] ^= 1;
    std::ofstream(w.path(), std::ios::binary | std::ios::trunc) << bytes;
    EXPECT_THROW(read_records(w.path()), FormatError);
  }
  fs::remove_all(dir);
}

TEST(TensorBoard, RejectsBadOptions) {
  EXPECT_THROW(callbacks::TensorBoard("", {}), InvalidArgument);
  EXPECT_THROW(callbacks::TensorBoard("logs", {.histogram_freq = -1}), InvalidArgument);
  EXPECT_THROW(callbacks::TensorBoard("logs", {.update_freq = -2}), InvalidArgument);
}

}  // namespace
}  // namespace tk
