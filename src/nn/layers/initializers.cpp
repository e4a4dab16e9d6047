// Keras initializers. Variance-scaling ones use Keras' truncated normal (resampled beyond 2 stddev,
// stddev corrected by 0.87962566103423978 so the variance is the requested one). Keras' VarianceScaling with its
// own parameters is the name "variance_scaling:SCALE:MODE:DISTRIBUTION" (e.g. EfficientNet's
// "variance_scaling:2:fan_out:truncated_normal"; MODE fan_in, fan_out or fan_avg; DISTRIBUTION truncated_normal,
// untruncated_normal or uniform).
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/data/dataset.h"

namespace tk::nn {
namespace {

struct SeedStream {
  std::mutex mu;
  std::mt19937_64 gen{std::random_device{}()};
  std::map<std::string, int> names;
};
SeedStream& stream() {
  static SeedStream s;
  return s;
}

void truncated_normal(float* p, int64_t n, double stddev, std::mt19937_64& gen) {
  std::normal_distribution<double> d(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    double v;
    do v = d(gen);
    while (std::abs(v) > 2.0);
    p[i] = static_cast<float>(v * stddev);
  }
}
void uniform(float* p, int64_t n, double limit, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> d(-limit, limit);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(d(gen));
}

const char* const kNames[] = {"glorot_uniform", "glorot_normal",  "he_normal", "he_uniform",
                              "lecun_normal",   "lecun_uniform",  "zeros",     "ones",
                              "random_normal",  "random_uniform", "orthogonal"};

// Keras 3's Orthogonal (gain 1): the (rows, cols) view of the shape (cols its last axis); Q of the QR of a
// (max, min) standard normal matrix with R's diagonal made positive (Gram-Schmidt gives that Q), transposed when
// rows < cols (RNNs' recurrent_kernel (units, G*units)).
void orthogonal(Tensor& t, std::mt19937_64& gen) {
  const int64_t cols = t.shape().rank() ? t.shape()[-1] : 1, rows = t.numel() / std::max<int64_t>(cols, 1);
  const int64_t m = std::max(rows, cols), k = std::min(rows, cols);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> a(static_cast<size_t>(m * k));  // (m, k), column j at a[i * k + j]
  for (double& v : a) v = d(gen);
  for (int64_t j = 0; j < k; ++j) {  // modified Gram-Schmidt: column j minus its projections, normalized
    for (int64_t p = 0; p < j; ++p) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += a[size_t(i * k + p)] * a[size_t(i * k + j)];
      for (int64_t i = 0; i < m; ++i) a[size_t(i * k + j)] -= dot * a[size_t(i * k + p)];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[size_t(i * k + j)] * a[size_t(i * k + j)];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < m; ++i) a[size_t(i * k + j)] /= norm;
  }
  float* p = t.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[r * cols + c] = static_cast<float>(rows >= cols ? a[size_t(r * k + c)] : a[size_t(c * k + r)]);
}
struct VarianceScaling {
  double scale;
  std::string mode, distribution;
};

// "variance_scaling:SCALE:MODE:DISTRIBUTION", or nullopt for another name; malformed: InvalidArgument.
std::optional<VarianceScaling> variance_scaling(const std::string& name) {
  const std::string prefix = "variance_scaling:";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  std::vector<std::string> f;
  for (size_t at = prefix.size();;) {
    const size_t colon = name.find(':', at);
    f.push_back(name.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  char* end = nullptr;
  const double scale = f.empty() ? 0.0 : std::strtod(f[0].c_str(), &end);
  const bool ok = f.size() == 3 && !f[0].empty() && *end == '\0' && scale > 0.0 &&
                  (f[1] == "fan_in" || f[1] == "fan_out" || f[1] == "fan_avg") &&
                  (f[2] == "truncated_normal" || f[2] == "untruncated_normal" || f[2] == "uniform");
  if (!ok)
    throw InvalidArgument("initializer '" + name +
                          "': expected variance_scaling:SCALE:MODE:DISTRIBUTION with SCALE > 0, MODE fan_in, fan_out "
                          "or fan_avg, DISTRIBUTION truncated_normal, untruncated_normal or uniform");
  return VarianceScaling{scale, f[1], f[2]};
}

}  // namespace

void check_initializer(const std::string& name) {
  if (variance_scaling(name)) return;
  for (const char* k : kNames)
    if (name == k) return;
  throw InvalidArgument("unknown initializer '" + name +
                        "' (expected one of glorot_uniform, glorot_normal, he_normal, he_uniform, lecun_normal, "
                        "lecun_uniform, zeros, ones, random_normal, random_uniform, orthogonal, or "
                        "variance_scaling:SCALE:MODE:DISTRIBUTION)");
}

void initialize(Tensor& t, const std::string& name, int64_t fan_in, int64_t fan_out, uint64_t seed) {
  check_initializer(name);
  float* p = t.data<float>();
  const int64_t n = t.numel();
  std::mt19937_64 gen(seed);
  const double fi = static_cast<double>(std::max<int64_t>(fan_in, 1));
  const double fo = static_cast<double>(std::max<int64_t>(fan_out, 1));
  constexpr double kTruncCorrection = 0.87962566103423978;
  if (const std::optional<VarianceScaling> vs = variance_scaling(name)) {  // Keras 3's VarianceScaling.__call__
    const double fan = vs->mode == "fan_in" ? fi : vs->mode == "fan_out" ? fo : (fi + fo) / 2.0;
    const double scale = vs->scale / std::max(1.0, fan);
    if (vs->distribution == "truncated_normal") {
      truncated_normal(p, n, std::sqrt(scale) / kTruncCorrection, gen);
    } else if (vs->distribution == "untruncated_normal") {
      std::normal_distribution<double> d(0.0, std::sqrt(scale));
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(d(gen));
    } else {
      uniform(p, n, std::sqrt(3.0 * scale), gen);
    }
  } else if (name == "orthogonal") {
    orthogonal(t, gen);
  } else if (name == "zeros" || name == "ones") {
    for (int64_t i = 0; i < n; ++i) p[i] = name == "ones" ? 1.0f : 0.0f;
  } else if (name == "glorot_uniform") {
    uniform(p, n, std::sqrt(6.0 / (fi + fo)), gen);
  } else if (name == "he_uniform") {
    uniform(p, n, std::sqrt(6.0 / fi), gen);
  } else if (name == "lecun_uniform") {
    uniform(p, n, std::sqrt(3.0 / fi), gen);
  } else if (name == "glorot_normal") {
    truncated_normal(p, n, std::sqrt(2.0 / (fi + fo)) / kTruncCorrection, gen);
  } else if (name == "he_normal") {
    truncated_normal(p, n, std::sqrt(2.0 / fi) / kTruncCorrection, gen);
  } else if (name == "lecun_normal") {
    truncated_normal(p, n, std::sqrt(1.0 / fi) / kTruncCorrection, gen);
  } else if (name == "random_normal") {
    std::normal_distribution<double> d(0.0, 0.05);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(d(gen));
  } else {  // random_uniform
    uniform(p, n, 0.05, gen);
  }
}

uint64_t next_seed() {
  std::lock_guard lock(stream().mu);
  return stream().gen();
}

std::string unique_name(const std::string& prefix) {
  std::lock_guard lock(stream().mu);
  int k = stream().names[prefix]++;
  return k == 0 ? prefix : prefix + "_" + std::to_string(k);
}

}  // namespace tk::nn

namespace tk {
void clear_session() {
  std::lock_guard lock(nn::stream().mu);
  nn::stream().names.clear();
}
void utils::set_random_seed(uint64_t seed) {
  std::lock_guard lock(nn::stream().mu);
  nn::stream().gen.seed(seed);
  data::set_global_seed(seed);  // shuffles and random maps without their own seed
}
}  // namespace tk
