#include "trainkit/nn/mixed_precision.h"

#include <mutex>

#include "trainkit/core/error.h"

namespace tk::mixed_precision {
namespace {
std::mutex g_mutex;
std::string g_policy = "float32";  // guarded by g_mutex
}  // namespace

void check_policy(const std::string& policy) {
  if (policy == "float32" || policy == "mixed_float16" || policy == "mixed_bfloat16") return;
  if (policy == "float16" || policy == "bfloat16")
    throw Unsupported("dtype policy '" + policy +
                      "' keeps the weights themselves in 16 bits, which trainkit does not do; use 'mixed_" + policy +
                      "' (float32 weights, " + policy + " compute: the same speed and memory for activations)");
  throw InvalidArgument("unknown dtype policy '" + policy + "' (Keras' names: float32, mixed_float16, mixed_bfloat16)");
}

DType compute_dtype(const std::string& policy) {
  if (policy == "mixed_float16") return DType::f16;
  if (policy == "mixed_bfloat16") return DType::bf16;
  check_policy(policy);
  return DType::f32;
}

void set_global_policy(const std::string& policy) {
  check_policy(policy);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_policy = policy;
}

std::string global_policy() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_policy;
}

}  // namespace tk::mixed_precision
