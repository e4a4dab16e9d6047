// "A training step allocates nothing", proved below operator new: this binary interposes the C allocator
// (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc) and mmap, so allocations by
// OpenBLAS, oneDNN, libgomp and the C++ runtime are counted too, from every thread. Whole fit() epochs are
// counted with two numbers of steps; the difference, divided by the extra steps, is what one step allocates.
// Built without sanitizers only (they interpose malloc themselves).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "../test_data.h"
#include "backends/cpu/kernels.h"
#include "trainkit/trainkit.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);
}

namespace {

struct Counts {
  int64_t calls = 0, bytes = 0, mmaps = 0, mmap_bytes = 0;
  int64_t blas_calls = 0, blas_bytes = 0, dnnl_calls = 0, dnnl_bytes = 0;  // made inside cblas_sgemm / oneDNN
  int64_t gemms = 0, dnnl_executes = 0;                                    // calls into them
};
std::atomic<int64_t> g_calls{0}, g_bytes{0}, g_mmaps{0}, g_mmap_bytes{0};
std::atomic<int64_t> g_blas_calls{0}, g_blas_bytes{0}, g_dnnl_calls{0}, g_dnnl_bytes{0}, g_gemms{0}, g_executes{0};
// Set on the calling thread while it is inside OpenBLAS's cblas_sgemm or oneDNN's dnnl_primitive_execute, so
// that what those libraries allocate is told apart from what trainkit allocates.
thread_local int t_in_blas = 0, t_in_dnnl = 0;

inline void count(size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  if (t_in_blas) {
    g_blas_calls.fetch_add(1, std::memory_order_relaxed);
    g_blas_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  } else if (t_in_dnnl) {
    g_dnnl_calls.fetch_add(1, std::memory_order_relaxed);
    g_dnnl_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  }
}

Counts now() {
  return {g_calls.load(),      g_bytes.load(),      g_mmaps.load(),      g_mmap_bytes.load(), g_blas_calls.load(),
          g_blas_bytes.load(), g_dnnl_calls.load(), g_dnnl_bytes.load(), g_gemms.load(),      g_executes.load()};
}

}  // namespace

extern "C" {
void* malloc(size_t n) {
  count(n);
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t a, size_t b) {
  count(a * b);
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  count(n);
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  count(n);
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  count(n);
  return __libc_memalign(alignment, n);
}
void* valloc(size_t n) {
  count(n);
  return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  count(n);
  void* p = __libc_memalign(alignment, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
// Libraries that map memory themselves (OpenBLAS buffers, oneDNN's JIT code) call these through the PLT.
void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  g_mmaps.fetch_add(1, std::memory_order_relaxed);
  g_mmap_bytes.fetch_add(static_cast<int64_t>(len), std::memory_order_relaxed);
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}

// trainkit's GEMM and oneDNN's primitive execution, wrapped (the real ones found with dlsym(RTLD_NEXT)).
using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc) {
  // The linker drops libopenblas from this binary (--as-needed: this definition satisfies every reference).
  static const auto real = [] {
    void* f = dlsym(RTLD_NEXT, "cblas_sgemm");
    if (!f) f = dlsym(dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL), "cblas_sgemm");
    if (!f) std::abort();
    return reinterpret_cast<Sgemm>(f);
  }();
  g_gemms.fetch_add(1, std::memory_order_relaxed);
  ++t_in_blas;
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  --t_in_blas;
}
using Execute = int (*)(const void*, void*, int, const void*);
int dnnl_primitive_execute(const void* primitive, void* stream, int nargs, const void* args) {
  static const auto real = reinterpret_cast<Execute>(dlsym(RTLD_NEXT, "dnnl_primitive_execute"));
  if (!real) std::abort();  // only reached from oneDNN's C++ API, so libdnnl is loaded
  g_executes.fetch_add(1, std::memory_order_relaxed);
  ++t_in_dnnl;
  const int status = real(primitive, stream, nargs, args);
  --t_in_dnnl;
  return status;
}
}

namespace tk {
namespace {

Tensor random_tensor(Shape s, uint32_t seed) { return testing::lcg_tensor(std::move(s), seed); }

Tensor labels(int64_t n, int classes) {
  Tensor y(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % classes);
  return y;
}

struct PerStep {
  double calls, bytes, mmaps;     // everything
  double own_calls;               // neither inside cblas_sgemm nor inside dnnl_primitive_execute
  double blas_calls, blas_bytes;  // inside OpenBLAS's sgemm
  double dnnl_calls, dnnl_bytes;  // inside oneDNN's primitive execution
  double gemms, executes;         // calls into them
};

// fit() over `steps` batches of 32 (arrays, or a Dataset over them), one epoch, counted from outside fit.
Counts count_fit(Model& model, const Tensor& x, const Tensor& y, int64_t steps, bool dataset) {
  const Tensor xs = x.slice_rows(0, 32 * steps), ys = y.slice_rows(0, 32 * steps);
  const Counts before = now();
  if (dataset)
    model.fit(data::Dataset::from_tensor_slices({xs, ys}).batch(32), {.epochs = 1, .verbose = 0});
  else
    model.fit(xs, ys, {.batch_size = 32, .epochs = 1, .verbose = 0});
  const Counts after = now();
  return {after.calls - before.calls,           after.bytes - before.bytes,
          after.mmaps - before.mmaps,           after.mmap_bytes - before.mmap_bytes,
          after.blas_calls - before.blas_calls, after.blas_bytes - before.blas_bytes,
          after.dnnl_calls - before.dnnl_calls, after.dnnl_bytes - before.dnnl_bytes,
          after.gemms - before.gemms,           after.dnnl_executes - before.dnnl_executes};
}

// What one more step costs: fit over 16 steps minus fit over 4, over 12 (after two warm-up fits).
PerStep per_step(Model& model, const Tensor& x, const Tensor& y, bool dataset, const char* what) {
  count_fit(model, x, y, 4, dataset);
  count_fit(model, x, y, 16, dataset);
  const Counts few = count_fit(model, x, y, 4, dataset), many = count_fit(model, x, y, 16, dataset);
  auto d = [&](int64_t Counts::*f) { return double(many.*f - few.*f) / 12; };
  const PerStep p{d(&Counts::calls),      d(&Counts::bytes),
                  d(&Counts::mmaps),      d(&Counts::calls) - d(&Counts::blas_calls) - d(&Counts::dnnl_calls),
                  d(&Counts::blas_calls), d(&Counts::blas_bytes),
                  d(&Counts::dnnl_calls), d(&Counts::dnnl_bytes),
                  d(&Counts::gemms),      d(&Counts::dnnl_executes)};
  std::printf(
      "[ malloc ] %-40s per step: %5.1f calls (%7.0f B), %3.1f mmaps; trainkit %4.1f; OpenBLAS %4.1f (%7.0f B) "
      "in %4.1f sgemm; oneDNN %5.1f (%5.0f B) in %3.1f executes\n",
      what, p.calls, p.bytes, p.mmaps, p.own_calls, p.blas_calls, p.blas_bytes, p.gemms, p.dnnl_calls, p.dnnl_bytes,
      p.executes);
  return p;
}

std::unique_ptr<Sequential> mlp() {  // small enough that OpenBLAS runs every GEMM on one thread
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({64}), layers::Dense(128, "relu"),
                                                              layers::Dense(64, "relu"), layers::Dense(10)});
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

std::unique_ptr<Sequential> cnn_bn() {
  auto m = std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({8, 8, 1}), layers::Conv2D(4, 3, "relu", {.padding = "same"}),
                            layers::BatchNormalization(), layers::MaxPooling2D(2),
                            layers::Conv2D(4, 3, "relu", {.padding = "same"}), layers::Flatten(), layers::Dense(10)});
  m->compile(optimizers::SGD({.learning_rate = 0.01f, .momentum = 0.9f}),
             losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  return m;
}

TEST(MallocCount, CounterSeesMallocAndMmap) {  // the interposition works, so the tests below can fail
  const Counts before = now();
  void* p = std::malloc(1000);
  void* q = nullptr;
  ASSERT_EQ(posix_memalign(&q, 64, 4096), 0);
  void* m = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::munmap(m, 1 << 20);
  std::free(q);
  std::free(p);
  const Counts after = now();
  EXPECT_EQ(after.calls - before.calls, 2);
  EXPECT_EQ(after.bytes - before.bytes, 1000 + 4096);
  EXPECT_EQ(after.mmaps - before.mmaps, 1);
}

TEST(MallocCount, MlpStepsOverArraysAllocateNothing) {
  auto m = mlp();
  const Tensor x = random_tensor({32 * 16, 64}, 1), y = labels(32 * 16, 10);
  const PerStep p = per_step(*m, x, y, false, "MLP 64-128-64-10, arrays");
  EXPECT_EQ(p.calls, 0.0);  // nothing at all, OpenBLAS included (these GEMMs are too small to thread)
  EXPECT_EQ(p.mmaps, 0.0);
  EXPECT_GT(p.gemms, 0.0);
}

// The default MLP's GEMMs run on the engine measured fastest per shape (backends/cpu/gemm.h). OpenBLAS's threaded
// GEMM (driver/level3/level3_thread.c, built with a large MAX_CPU_NUMBER as Debian does) mallocs its job table on
// every call that it splits across threads (512 KiB each at these shapes); oneDNN allocates its execution
// context's argument map inside dnnl_primitive_execute (~7 allocations of ~40 bytes per call). Both are the
// libraries', documented in docs/testing.md; trainkit itself allocates nothing, OpenBLAS no more than one table
// per GEMM, oneDNN no more than 8 small blocks per call.
TEST(MallocCount, DefaultMlpStepsAllocateOnlyLibraryBookkeeping) {
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{layers::Input({784}), layers::Dense(256, "relu"),
                                                              layers::Dense(128, "relu"), layers::Dense(10)});
  m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  const Tensor x = random_tensor({32 * 16, 784}, 4), y = labels(32 * 16, 10);
  const PerStep p = per_step(*m, x, y, false, "MLP 784-256-128-10, arrays");
  EXPECT_EQ(p.own_calls, 0.0);
  EXPECT_LE(p.blas_calls, p.gemms);
  EXPECT_LE(p.dnnl_calls, 8 * p.executes);
  EXPECT_LE(p.dnnl_bytes, 1024 * p.executes);
  EXPECT_EQ(p.mmaps, 0.0);
}

// The CNN with BatchNormalization under both convolution kernels. im2col + OpenBLAS: as the MLP (only
// OpenBLAS's job tables). oneDNN: trainkit calls dnnl_primitive_execute with argument arrays built once (the
// C++ API's execute() built a std::vector or map per call), and oneDNN allocates inside dnnl_primitive_execute
// (~3.6 per execute, ~60 bytes each): documented in docs/testing.md, bounded here so that anything more shows.
TEST(MallocCount, CnnWithBatchNormStepsUnderBothConvBackends) {
  const Tensor x = random_tensor({32 * 16, 8, 8, 1}, 2), y = labels(32 * 16, 10);
  const bool onednn = cpu::register_onednn_conv_kernels();
  if (onednn) {
    auto m = cnn_bn();
    const PerStep p = per_step(*m, x, y, false, "CNN + BatchNorm, arrays, oneDNN");
    EXPECT_GT(p.executes, 0.0);
    // oneDNN's OpenMP workers allocate inside its parallel regions too (8 per step with 2 threads, 0 with 1): the
    // calling-thread flag cannot attribute those, so "trainkit's" count is bounded, not zero.
    EXPECT_LE(p.own_calls, p.executes);
    EXPECT_LE(p.dnnl_calls, 6 * p.executes);
    EXPECT_LE(p.bytes, 1024 * p.executes);
    EXPECT_EQ(p.mmaps, 0.0);
  }
  cpu::register_conv_kernels();  // im2col + OpenBLAS for the programs built from now
  {
    auto m = cnn_bn();
    const PerStep p = per_step(*m, x, y, false, "CNN + BatchNorm, arrays, im2col");
    EXPECT_EQ(p.own_calls, 0.0);
    EXPECT_LE(p.blas_calls, p.gemms);
    EXPECT_EQ(p.executes, 0.0);
    EXPECT_EQ(p.mmaps, 0.0);
  }
  if (onednn) cpu::register_onednn_conv_kernels();
}

// Through a Dataset, the input pipeline makes each batch (element vectors, the queue's bookkeeping; the tensors
// themselves come from trainkit's allocator): ~7 small allocations per step (~470 bytes), the input's, not
// the step's. Bounded by the batch's own bytes, so that an allocation the size of an activation would show.
TEST(MallocCount, StepsOverADatasetAllocateOnlyTheBatches) {
  auto m = mlp();
  const Tensor x = random_tensor({32 * 16, 64}, 3), y = labels(32 * 16, 10);
  const PerStep p = per_step(*m, x, y, true, "MLP 64-128-64-10, Dataset.batch(32)");
  const double batch_bytes = 32.0 * 64 * 4 + 32.0 * 4;
  EXPECT_LE(p.bytes, batch_bytes) << "more than the batch itself per step";
  EXPECT_LE(p.calls, 16.0);
  EXPECT_EQ(p.blas_calls, 0.0);
  EXPECT_EQ(p.mmaps, 0.0);
}

}  // namespace
}  // namespace tk
