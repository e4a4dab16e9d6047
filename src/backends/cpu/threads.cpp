// Thread count from the cores other processes leave free (backends/cpu/threads.h).
#include "backends/cpu/threads.h"

#include <omp.h>
#include <time.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace tk::cpu {
namespace {

struct Governor {
  bool adapt = true;
  int max_threads = 1, cores = 1;
  std::atomic<int> threads{1};
  std::atomic<int64_t> next_ns{0};
  std::mutex mu;
  // The previous sample: all cores' busy time (/proc/stat) and this process's CPU time, at wall time `wall`.
  double busy_s = -1, own_s = 0, wall_s = 0;
};

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// Seconds all cores spent busy since boot (user, nice, system, irq, softirq, steal); < 0 when unreadable.
double machine_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                            &v[6], &v[7]);
  std::fclose(f);
  if (n < 8) return -1;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Governor& governor() {
  static Governor* instance = [] {
    auto* g = new Governor;  // never destroyed: worker threads may still ask at exit
    g->max_threads = omp_get_max_threads();
    g->cores = std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
    const char* pin = std::getenv("TK_THREADS");
    if (pin && *pin && std::strcmp(pin, "auto") != 0) {
      const int n = std::atoi(pin);
      if (n > 0) g->max_threads = n;
      g->adapt = false;
    }
    if (g->max_threads <= 1) g->adapt = false;
    g->threads = g->max_threads;
    return g;
  }();
  return *instance;
}

// New worker threads need the flush-to-zero / denormals-are-zero mode the backend gives its team (cpu_backend.cpp).
void set_worker_fp_mode() {
#pragma omp parallel
  if (omp_get_thread_num() != 0) _mm_setcsr(_mm_getcsr() | 0x8000 | 0x0040);
}

}  // namespace

int adapted_threads() noexcept { return governor().threads.load(std::memory_order_relaxed); }

void adapt_threads() noexcept {
  Governor& g = governor();
  if (omp_in_parallel()) return;
  if (g.adapt) {
    const int64_t now = now_ns();
    if (now >= g.next_ns.load(std::memory_order_relaxed) && g.mu.try_lock()) {
      g.next_ns.store(now + 250'000'000, std::memory_order_relaxed);
      const double busy = machine_busy_seconds(), own = process_cpu_seconds(), wall = 1e-9 * double(now);
      if (busy >= 0 && g.busy_s >= 0 && wall > g.wall_s) {
        // Cores that other processes kept busy over the window: all busy time less our own.
        const double others = std::max(0.0, (busy - g.busy_s) - (own - g.own_s)) / (wall - g.wall_s);
        const int free_cores = g.cores - static_cast<int>(std::lround(others));
        g.threads.store(std::clamp(free_cores, 1, g.max_threads), std::memory_order_relaxed);
      }
      g.busy_s = busy, g.own_s = own, g.wall_s = wall;
      g.mu.unlock();
    }
  }
  // Each thread's OpenMP team size is its own setting: apply the choice to the calling thread.
  const int want = g.threads.load(std::memory_order_relaxed);
  const int have = omp_get_max_threads();
  if (want != have) {
    omp_set_num_threads(want);
    if (want > have) set_worker_fp_mode();
  }
}

}  // namespace tk::cpu
