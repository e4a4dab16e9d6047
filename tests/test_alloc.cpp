// A steady-state training step allocates nothing: every buffer comes from the program's arena, which
// the memory planner sized before the first step. The global operator new is replaced in this test
// binary to count heap allocations. What oneDNN allocates inside dnnl_primitive_execute (its execution
// context's argument map, ~7 allocations of ~40 bytes per call) is counted apart: the library's, measured and
// bounded by tests/alloc/test_malloc_count.cpp, documented in docs/testing.md.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "graph/schedule.h"
#include "heap_bytes.h"
#include "test_data.h"
#include "trainkit/trainkit.h"

namespace {
std::atomic<int64_t> g_allocations{0}, g_onednn_allocations{0};
thread_local int t_in_onednn = 0;
// Bytes held and their peak (heap_bytes.h), for the tests that bound what an operation copies.
std::atomic<int64_t> g_heap_bytes{0}, g_heap_peak{0};
inline void count_allocation() {
  (t_in_onednn ? g_onednn_allocations : g_allocations).fetch_add(1, std::memory_order_relaxed);
}
inline void* held(void* p) {
  if (!p) return p;
  const auto n = static_cast<int64_t>(malloc_usable_size(p));
  const int64_t now = g_heap_bytes.fetch_add(n, std::memory_order_relaxed) + n;
  for (int64_t peak = g_heap_peak.load(std::memory_order_relaxed);
       now > peak && !g_heap_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed);) {
  }
  return p;
}
inline void release(void* p) {
  if (p) g_heap_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
}  // namespace

namespace tk::testing {
int64_t heap_bytes() { return g_heap_bytes.load(); }
int64_t heap_peak() { return g_heap_peak.load(); }
void reset_heap_peak() { g_heap_peak = g_heap_bytes.load(); }
}  // namespace tk::testing

// oneDNN's primitive execution, wrapped to tell its allocations apart (the real one found with dlsym).
extern "C" int dnnl_primitive_execute(const void* primitive, void* stream, int nargs, const void* args) {
  using Execute = int (*)(const void*, void*, int, const void*);
  static const auto real = reinterpret_cast<Execute>(dlsym(RTLD_NEXT, "dnnl_primitive_execute"));
  if (!real) std::abort();  // only reached from trainkit's oneDNN kernels, so libdnnl is loaded
  ++t_in_onednn;
  const int status = real(primitive, stream, nargs, args);
  --t_in_onednn;
  return status;
}

void* operator new(std::size_t n) {
  count_allocation();
  if (void* p = held(std::malloc(n ? n : 1))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
// Every other form too, so that no allocation bypasses the counter and new/delete always pair up
// (AddressSanitizer checks that).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  count_allocation();
  return held(std::malloc(n ? n : 1));
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void* operator new(std::size_t n, std::align_val_t a) {
  count_allocation();
  const auto al = static_cast<std::size_t>(a);
  if (void* p = held(std::aligned_alloc(al, (n + al - 1) / al * al))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }

namespace tk {
namespace {

Tensor random_tensor(Shape s, uint32_t seed) { return testing::lcg_tensor(std::move(s), seed); }

void expect_no_allocations_per_step(Model& model, const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
  for (int i = 0; i < 3; ++i) model.train_on_batch(x, y);  // compile the program, create optimizer slots
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 20; ++i) model.train_on_batch(x, y);
  const int64_t per_step = (g_allocations.load() - before) / 20;
  EXPECT_EQ(g_allocations.load() - before, 0)
      << "heap allocations in 20 steady-state steps (" << per_step << " per step)";
}

TEST(ZeroAllocation, DefaultMlpTrainingStepWithAdam) {
  Sequential model({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  Tensor y(Shape{128}, DType::u8);
  for (int i = 0; i < 128; ++i) y.data<uint8_t>()[i] = static_cast<uint8_t>(i % 10);
  expect_no_allocations_per_step(model, {random_tensor({128, 784}, 1)}, {y});
}

TEST(ZeroAllocation, DropoutSoftmaxSgdMomentumAndTwoOutputs) {
  KerasTensor in = Input({32});
  KerasTensor h = layers::Dropout(0.3f)(layers::Dense(64, "gelu")(in));
  KerasTensor a = layers::Dense(5, "softmax", {.name = "probs"})(h);
  KerasTensor b = layers::Dense(1, "sigmoid", {.name = "flag"})(layers::Concatenate()({h, in}));
  Model model({in}, {a, b});
  model.compile(optimizers::SGD({.learning_rate = 0.01f, .momentum = 0.9f}),
                std::vector<Loss>{"categorical_crossentropy", "binary_crossentropy"}, {"accuracy"});
  Tensor ya = Tensor::zeros({64, 5}), yb = Tensor::zeros({64, 1});
  for (int i = 0; i < 64; ++i) {
    ya.data<float>()[i * 5 + i % 5] = 1.0f;
    yb.data<float>()[i] = static_cast<float>(i % 2);
  }
  expect_no_allocations_per_step(model, {random_tensor({64, 32}, 2)}, {ya, yb});
}

TEST(ZeroAllocation, CounterSeesAllocations) {  // the counter itself works, so the tests above can fail
  const int64_t before = g_allocations.load();
  auto* v = new std::vector<int>(100);
  delete v;
  EXPECT_GE(g_allocations.load() - before, 2);
}

// Keras' sample_weight (issue 33): the weights are staged with the targets, checked without allocating.
TEST(ZeroAllocation, SampleWeightedTrainingStep) {
  Sequential model({layers::Input({32}), layers::Dense(16, "relu"), layers::Dense(4)});
  model.compile(optimizers::SGD(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  Tensor y(Shape{64}, DType::i32), w(Shape{64}, DType::f32);
  for (int i = 0; i < 64; ++i) {
    y.data<int32_t>()[i] = i % 4;
    w.data<float>()[i] = 0.25f * static_cast<float>(i % 5);
  }
  const std::vector<Tensor> x{random_tensor({64, 32}, 3)}, ys{y};
  for (int i = 0; i < 3; ++i) model.train_on_batch(x, ys, w);
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 20; ++i) model.train_on_batch(x, ys, w);
  EXPECT_EQ(g_allocations.load() - before, 0) << "heap allocations in 20 steady-state weighted steps";
}

}  // namespace
}  // namespace tk
