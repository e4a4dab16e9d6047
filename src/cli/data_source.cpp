#include "cli/data_source.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "data/formats/crc32c.h"
#include "trainkit/core/error.h"
#include "trainkit/data/csv.h"
#include "trainkit/data/hdf5.h"
#include "trainkit/data/idx.h"
#include "trainkit/data/npy.h"
#include "trainkit/data/tfrecord.h"

namespace tk::cli {
namespace {

// Labels as int32 scalars per sample (sparse categorical targets).
Tensor as_labels(const Tensor& t, const std::string& where) {
  if (t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16) {
    Tensor f = t.dtype() == DType::f32 ? t : t.to(DType::f32);
    for (int64_t i = 0; i < f.numel(); ++i) {
      const float v = f.data<float>()[i];
      if (v != static_cast<float>(static_cast<int64_t>(v)))
        throw InvalidArgument(where + ": label " + std::to_string(v) +
                              " is not a whole number (classification labels must be class indices)");
    }
  }
  return t.dtype() == DType::i32 ? t : t.to(DType::i32);
}

data::Element sample(const Tensor& x, const Tensor& y, const std::string& where) {
  return {as_features(x), as_labels(y, where)};
}

data::Dataset from_arrays(Tensor x, Tensor y, const std::string& where) {
  if (x.shape().rank() == 0 || y.shape().rank() == 0 || x.dim(0) != y.dim(0))
    throw InvalidArgument(where + ": features " + x.shape().to_string() + " and labels " + y.shape().to_string() +
                          " must have the same number of rows");
  if (y.shape().rank() > 1 && y.shape().sample_shape().numel() == 1) y = y.reshape(Shape({y.dim(0)}));
  return data::Dataset::from_tensor_slices({as_features(x), as_labels(y, where)});
}

// "image:28x28:uint8" -> FeatureSpec
data::FeatureSpec feature_spec(const std::string& text, DType default_dtype, const std::string& option) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.empty() || parts[0].empty() || parts.size() > 3)
    throw InvalidArgument(option + ": expected NAME[:DIMS[:DTYPE]] (e.g. image:28x28 or image:784:uint8), got '" +
                          text + "'");
  data::FeatureSpec spec{parts[0], default_dtype, Shape(std::vector<int64_t>{})};
  if (parts.size() >= 2 && !parts[1].empty()) {
    std::vector<int64_t> dims;
    for (const std::string& d : split(parts[1], 'x')) {
      char* end = nullptr;
      const long long v = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end || v <= 0)
        throw InvalidArgument(option + ": bad dimensions '" + parts[1] + "' in '" + text + "' (write e.g. 28x28)");
      dims.push_back(v);
    }
    spec.shape = Shape(dims);
  }
  if (parts.size() == 3) spec.dtype = dtype_from_name(parts[2]);
  return spec;
}

// The header line's names (what --x defaults to); the CSV reader checks the rest of the file.
std::vector<std::string> csv_header(const std::string& path, const std::string& where) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) throw IoError(where + ": cannot read the header line");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::vector<std::string> names = split(line, ',');
  for (std::string& n : names)
    if (n.size() >= 2 && n.front() == '"' && n.back() == '"') n = n.substr(1, n.size() - 2);
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// TFRecordOptions' compression of a file, from its first bytes (so a ZLIB file needs no particular name):
// a plain file's first record header (8-byte length, then its masked CRC32C); gzip's magic 1f 8b; a zlib
// stream header (CM 8, FCHECK: (CMF*256 + FLG) % 31 == 0). Anything else is read as plain, and the reader
// reports what is wrong with it at its offset.
data::Compression sniff_tfrecord_compression(const std::string& path) {
  unsigned char b[12] = {};
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(b), sizeof b);
  const auto n = static_cast<size_t>(f.gcount());
  if (n == sizeof b) {
    const uint32_t stored = static_cast<uint32_t>(b[8]) | static_cast<uint32_t>(b[9]) << 8 |
                            static_cast<uint32_t>(b[10]) << 16 | static_cast<uint32_t>(b[11]) << 24;
    if (data::masked_crc32c(b, 8) == stored) return data::Compression::none;
  }
  if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return data::Compression::gzip;
  if (n >= 2 && (b[0] & 0x0f) == 8 && (b[0] >> 4) <= 7 && (b[0] * 256 + b[1]) % 31 == 0) return data::Compression::zlib;
  return data::Compression::none;
}

}  // namespace

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Tensor as_features(const Tensor& t) {
  // Kept in their own dtype: staging converts each batch (and a Rescaling layer scales uint8 pixels).
  if (t.dtype() == DType::boolean) return t.to(DType::u8);
  return t;
}

float feature_scale(DType t) { return t == DType::u8 ? 1.0f / 255.0f : 1.0f; }

std::string data_format(const std::string& path, const std::string& format) {
  if (format != "auto") {
    static const std::vector<std::string> known{"idx", "csv", "npy", "npz", "hdf5", "tfrecord"};
    if (std::find(known.begin(), known.end(), format) == known.end())
      throw InvalidArgument("--format: unknown format '" + format + "' (auto, idx, csv, npy, npz, hdf5, tfrecord)");
    return format;
  }
  std::string p = path;
  if (p.ends_with(".gz")) p = p.substr(0, p.size() - 3);
  if (p.ends_with(".zlib")) p = p.substr(0, p.size() - 5);
  if (p.ends_with(".csv")) return "csv";
  if (p.ends_with(".npz")) return "npz";
  if (p.ends_with(".npy")) return "npy";
  if (p.ends_with(".h5") || p.ends_with(".hdf5") || p.ends_with(".hdf")) return "hdf5";
  if (p.ends_with(".tfrecord") || p.ends_with(".tfrecords")) return "tfrecord";
  if (p.ends_with("-ubyte") || p.ends_with(".idx")) return "idx";
  throw InvalidArgument("cannot tell the format of '" + path +
                        "' from its name: pass --format (idx, csv, npy, npz, hdf5, tfrecord)");
}

data::Dataset open_data_file(const std::string& path, const DataArgs& a, const std::string& option) {
  const std::string fmt = data_format(path, a.format);
  const std::string where = option + " " + path;
  if (fmt == "idx" || fmt == "npy") {
    if (a.y.empty())
      throw InvalidArgument(where + ": " + fmt + " needs the labels file as --y (e.g. --y train-labels-idx1-ubyte.gz)");
    const std::string& ypath = a.y;
    if (fmt == "idx") {
      auto [x, y] = data::load_idx_pair(path, ypath);
      return from_arrays(x, y, where);
    }
    return from_arrays(data::load_npy(path), data::load_npy(ypath), where);
  }
  if (fmt == "npz") {
    const std::string xk = a.x.empty() ? "x" : a.x, yk = a.y.empty() ? "y" : a.y;
    return from_arrays(data::load_npz(path, xk), data::load_npz(path, yk), where);
  }
  if (fmt == "hdf5") {
    const std::vector<std::string> names{a.x.empty() ? "x" : a.x, a.y.empty() ? "y" : a.y};
    auto open = [path, names] { return data::open_hdf5(path, names); };
    return data::Dataset::from_reader(open, "hdf5(" + path + ")").map([where](data::Element e) {
      return sample(e[0], e[1], where);
    });
  }
  if (fmt == "tfrecord") {
    if (a.x.empty())
      throw InvalidArgument(where + ": name the feature with --x NAME[:DIMS[:DTYPE]] (e.g. --x image:28x28)");
    std::vector<data::FeatureSpec> specs{feature_spec(a.x, DType::f32, "--x"),
                                         feature_spec(a.y.empty() ? "label" : a.y, DType::i64, "--y")};
    const data::Compression c = sniff_tfrecord_compression(path);  // plain, GZIP or ZLIB, whatever the name
    auto open = [path, specs, c] { return data::open_tfrecord(path, specs, c); };
    return data::Dataset::from_reader(open, "tfrecord(" + path + ")").map([where](data::Element e) {
      return sample(e[0], e[1], where);
    });
  }
  // csv: one scalar per column; features stacked into a vector
  if (a.y.empty()) throw InvalidArgument(where + ": name the label column with --y");
  data::CsvOptions o;
  if (!a.x.empty()) o.select = split(a.x, ',');
  if (o.select.empty()) {
    o.select = csv_header(path, where);
    const auto before = o.select.size();
    o.select.erase(std::remove(o.select.begin(), o.select.end(), a.y), o.select.end());
    if (o.select.size() == before)
      throw InvalidArgument(where + ": no column named '" + a.y + "' for --y (the header has: " + join(o.select) + ")");
  }
  o.select.push_back(a.y);
  const auto k = static_cast<int64_t>(o.select.size()) - 1;
  auto open = [path, o] { return data::open_csv(path, o); };
  return data::Dataset::from_reader(open, "csv(" + path + ")").map([k, where](data::Element e) {
    Tensor x(Shape({k}), DType::f32);
    for (int64_t i = 0; i < k; ++i) x.data<float>()[i] = e[static_cast<size_t>(i)].to(DType::f32).data<float>()[0];
    return sample(x, e[static_cast<size_t>(k)], where);
  });
}

data::Dataset open_features_file(const std::string& path, const DataArgs& a, const std::string& option) {
  const std::string fmt = data_format(path, a.format);
  const std::string where = option + " " + path;
  const std::string xk = a.x.empty() ? "x" : a.x;
  auto arrays = [](const Tensor& x) { return data::Dataset::from_tensor_slices({as_features(x)}); };
  auto features = [](data::Element e) { return data::Element{as_features(e[0])}; };
  if ((fmt == "idx" || fmt == "npy") && !a.x.empty())
    throw InvalidArgument(where + ": --x does not apply to " + fmt + " (the file is the features itself): drop --x");
  if (fmt == "idx") return arrays(data::load_idx(path));
  if (fmt == "npy") return arrays(data::load_npy(path));
  if (fmt == "npz") return arrays(data::load_npz(path, xk));
  if (fmt == "hdf5") {
    auto open = [path, xk] { return data::open_hdf5(path, {xk}); };
    return data::Dataset::from_reader(open, "hdf5(" + path + ")").map(features);
  }
  if (fmt == "tfrecord") {
    if (a.x.empty())
      throw InvalidArgument(where + ": name the feature with --x NAME[:DIMS[:DTYPE]] (e.g. --x image:28x28)");
    std::vector<data::FeatureSpec> specs{feature_spec(a.x, DType::f32, "--x")};
    const data::Compression c = sniff_tfrecord_compression(path);
    auto open = [path, specs, c] { return data::open_tfrecord(path, specs, c); };
    return data::Dataset::from_reader(open, "tfrecord(" + path + ")").map(features);
  }
  // csv: the --x columns (default every column), one scalar each, stacked into a vector
  data::CsvOptions o;
  o.select = a.x.empty() ? csv_header(path, where) : split(a.x, ',');
  const auto k = static_cast<int64_t>(o.select.size());
  auto open = [path, o] { return data::open_csv(path, o); };
  return data::Dataset::from_reader(open, "csv(" + path + ")").map([k](data::Element e) {
    Tensor x(Shape({k}), DType::f32);
    for (int64_t i = 0; i < k; ++i) x.data<float>()[i] = e[static_cast<size_t>(i)].to(DType::f32).data<float>()[0];
    return data::Element{x};
  });
}

}  // namespace tk::cli
