#!/usr/bin/env bash
# Sets everything up and runs the test suite twice: a Release build with warnings as errors, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Also checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs="$(nproc)"

echo "== format check (clang-format)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run -Werror

echo "== Release build, warnings as errors"
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=ON >/dev/null
cmake --build build-ci -j"$jobs"
(cd build-ci && ctest --output-on-failure -j"$jobs")

echo "== ASan + UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_SANITIZE=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$jobs" -LE slow)
echo "== all tests passed"
