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
#include <string>

#include "runtime/settings.h"

namespace tk::cpu {
namespace {

struct Governor {
  int max_threads = 1, cores = 1;
  std::atomic<int> threads{1};
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
    bool adapt = true;
    const char* pin = runtime::setting_raw(runtime::Setting::threads);
    if (pin && *pin && std::strcmp(pin, "auto") != 0) {
      const int n = std::atoi(pin);
      if (n > 0) g->max_threads = n;
      adapt = false;
    }
    g->threads = g->max_threads;
    if (adapt && g->max_threads > 1) {
      // Decided once, from a 100 ms sample before the first step: a count that changed during a run would
      // change the last bits of a trained model (oneDNN's and the reductions' partitions follow the team size).
      const double busy0 = machine_busy_seconds(), own0 = process_cpu_seconds(), wall0 = 1e-9 * double(now_ns());
      usleep(100000);
      const double busy1 = machine_busy_seconds(), own1 = process_cpu_seconds(), wall1 = 1e-9 * double(now_ns());
      if (busy0 >= 0 && busy1 >= 0 && wall1 > wall0) {
        const double others = std::max(0.0, (busy1 - busy0) - (own1 - own0)) / (wall1 - wall0);
        g->threads = std::clamp(g->cores - static_cast<int>(std::lround(others)), 1, g->max_threads);
      }
    }
    return g;
  }();
  return *instance;
}

// New worker threads need the flush-to-zero / denormals-are-zero mode the backend gives its team (cpu_backend.cpp).
void set_worker_fp_mode() {
#pragma omp parallel
  if (omp_get_thread_num() != 0) _mm_setcsr(_mm_getcsr() | 0x8000 | 0x0040);
}

thread_local int t_share = 0;  // set_thread_share: this thread's limit (0: none)

}  // namespace

int64_t thread_index() noexcept {
  static std::atomic<int64_t> next{0};
  thread_local const int64_t index = next.fetch_add(1, std::memory_order_relaxed);
  return index;
}

void set_thread_share(int n) noexcept {
  t_share = n > 0 ? n : 0;
  adapt_threads();
}

int adapted_threads() noexcept { return governor().threads.load(std::memory_order_relaxed); }
int max_threads() noexcept { return governor().max_threads; }

bool pin_threads(int n) noexcept {
  Governor& g = governor();
  if (n < 1 || n > g.max_threads) return false;
  g.threads.store(n, std::memory_order_relaxed);
  adapt_threads();
  return true;
}

void adapt_threads() noexcept {
  Governor& g = governor();
  if (omp_in_parallel()) return;
  // Each thread's OpenMP team size is its own setting: apply the choice to the calling thread.
  const int all = g.threads.load(std::memory_order_relaxed);
  const int want = t_share > 0 ? std::min(t_share, all) : all;
  const int have = omp_get_max_threads();
  if (want != have) {
    omp_set_num_threads(want);
    if (want > have) set_worker_fp_mode();
  }
}

}  // namespace tk::cpu
