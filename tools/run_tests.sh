#!/usr/bin/env bash
# Sets everything up and runs the test suite: a Release build with warnings as errors, an AddressSanitizer +
# UndefinedBehaviorSanitizer build, the input pipeline's tests under ThreadSanitizer, and every parser's
# fuzz target for a bounded time (tools/run_fuzz.sh). Also checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs="$(nproc)"

echo "== format check (clang-format)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run -Werror

echo "== Release build, warnings as errors"
# Where the CUDA toolkit is installed (CI), the CUDA backend must compile and link: TK_CUDA=ON. A plain
# Debian 12 machine has no toolkit (it is not in Debian main): AUTO builds without it.
cuda=AUTO
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
echo "   (TK_CUDA=$cuda)"
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=ON -DTK_CUDA="$cuda" >/dev/null
cmake --build build-ci -j"$jobs"
(cd build-ci && ctest --output-on-failure -j"$jobs")

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_SANITIZE=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$jobs" -LE slow)

echo "== ThreadSanitizer build: input pipeline and readers"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_TSAN=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF \
  -DTK_CUDA=OFF >/dev/null  # also compiles the no-CUDA branch
cmake --build build-tsan -j"$jobs" --target trainkit_data_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./build-tsan/tests/trainkit_data_tests

echo "== fuzzing every parser (${FUZZ_SECONDS:-20} s each)"
bash tools/run_fuzz.sh
echo "== all tests passed"
