#!/usr/bin/env bash
# Sets everything up and runs the test suite: a Release build with warnings as errors, the Python package (pip install
# ., pytest), an AddressSanitizer +
# UndefinedBehaviorSanitizer build, the input pipeline's tests under ThreadSanitizer, and every parser's
# fuzz target for a bounded time (tools/run_fuzz.sh). Also checks formatting.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
jobs="$(nproc)"

echo "== format check (clang-format)"
git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format --dry-run -Werror

echo "== layering: graph/ and nn/ include no backend header (CONTRIBUTING.md, \"Adding a backend\")"
if grep -rln '#include "backends/' src/graph src/nn || grep -rl 'backends/' src/nn; then
  echo "the files above reach into src/backends/: go through graph::Backend (src/graph/backend.h)" >&2
  exit 1
fi

echo "== every mutation patch applies at HEAD (tools/mutations/*.patch)"
bash tools/mutation_check.sh --check-apply

echo "== Release build, warnings as errors"
# Where the CUDA toolkit is installed (CI), the CUDA backend must compile and link: TK_CUDA=ON. A plain
# Debian 12 machine has no toolkit (it is not in Debian main): AUTO builds without it.
cuda=AUTO
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then cuda=ON; fi
echo "   (TK_CUDA=$cuda)"
# ccache: the Python package's build (below) compiles the same library objects with the same flags, and takes them
# from the cache this build fills.
export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=Release -DTK_WERROR=ON -DTK_CUDA="$cuda" >/dev/null
step_start=$SECONDS
cmake --build build-ci -j"$jobs"
echo "   (Release build: $((SECONDS - step_start)) s)"
step_start=$SECONDS
(cd build-ci && ctest --output-on-failure -j"$jobs")
echo "   (Release tests: $((SECONDS - step_start)) s)"

echo "== Python package: pip install . into a virtual environment, then its tests (pytest, Keras 3's numpy backend)"
# As README.md says (pip install .), plus (--config-settings: Debian 12's pip 23.0 has no -C): the build folder build-py kept between runs, warnings as errors and the
# CUDA setting of build-ci, so that ccache has every library object from the build above. Keras' numpy backend
# imports jax and scipy; never TensorFlow or PyTorch here.
step_start=$SECONDS
rm -rf build-py-venv
python3 -m venv build-py-venv
build-py-venv/bin/pip install -q pytest keras jax scipy
# The compiler build-ci used, by the same name: scikit-build-core would take Python's (x86_64-linux-gnu-g++ on
# Debian), the same binary, but ccache keys on the name too.
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' build-ci/CMakeCache.txt)"
build-py-venv/bin/pip install -q --config-settings=build-dir=build-py --config-settings=cmake.define.CMAKE_CXX_COMPILER="$cxx" \
  --config-settings=cmake.define.TK_WERROR=ON --config-settings=cmake.define.TK_CUDA="$cuda" .
KERAS_BACKEND=numpy build-py-venv/bin/python -m pytest -q python/tests
echo "   (Python package and its tests: $((SECONDS - step_start)) s)"

echo "== install and build examples/ as an outside project"
step_start=$SECONDS
rm -rf build-install build-examples
cmake --install build-ci --prefix "$PWD/build-install" >/dev/null
cmake -S examples -B build-examples -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/build-install" >/dev/null
cmake --build build-examples -j"$jobs"
# Smoke run: fashion_mlp trains 10 epochs on all of Fashion-MNIST, too long for CI, so it runs on the first 2000
# training and 500 test images (TK_FASHION_MNIST_DIR), cut from the real files with the count in the header rewritten.
fm_src="${TK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
fm_small=build-examples/fashion-mnist-small
source tools/idx_head.sh
mkdir -p "$fm_small"
idx_head "$fm_src" "$fm_small" train-images-idx3-ubyte 2000 16 784
idx_head "$fm_src" "$fm_small" train-labels-idx1-ubyte 2000 8 1
idx_head "$fm_src" "$fm_small" t10k-images-idx3-ubyte 500 16 784
idx_head "$fm_src" "$fm_small" t10k-labels-idx1-ubyte 500 8 1
TK_FASHION_MNIST_DIR="$fm_small" ./build-examples/fashion_mlp | tee build-examples/fashion_mlp.log | tail -n 3
acc="$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' build-examples/fashion_mlp.log)"
awk -v acc="$acc" 'BEGIN { exit !(acc > 0.5) }' || { echo "fashion_mlp: test accuracy '$acc', expected > 0.5"; exit 1; }
echo "   (install, outside build and smoke run: $((SECONDS - step_start)) s)"

echo "== mutation check: a rotating subset, chosen by the commit hash (docs/testing.md)"
# Each patch breaks a claimed behaviour on purpose; the tests it names must fail. build-ci is mutated in place and
# rebuilt incrementally per patch (the checkout is restored after each), so this costs the patches' rebuilds and
# their tests: 3 patches (TK_MUTATION_SUBSET) of the M in tools/mutations/ per run, each one every M/3 commits.
step_start=$SECONDS
TK_MUTATION_BUILD=build-ci TK_MUTATION_SUBSET="${TK_MUTATION_SUBSET:-3}" TK_MUTATION_JOBS="$jobs" \
  bash tools/mutation_check.sh
echo "   (mutation check: $((SECONDS - step_start)) s)"

echo "== ASan + UBSan build"
# Line tables only (-g1: file and line in every report, half the compile time of full -g), the tests themselves at
# -O1 (tests/CMakeLists.txt), and trainkit_tests as 8 gtest shards, one process each (TK_TEST_SHARDS: a sanitized
# process start costs more than most tests).
step_start=$SECONDS
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DTK_SANITIZE=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF -DTK_TEST_SHARDS=8 >/dev/null
cmake --build build-asan -j"$jobs"
echo "   (ASan + UBSan build: $((SECONDS - step_start)) s)"
step_start=$SECONDS
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# (MPI tests: Open MPI's own allocations at MPI_Init read as leaks to LeakSanitizer; they run in the Release stage.)
(cd build-asan && ctest --output-on-failure -j"$jobs" -LE "slow|mpi")
echo "   (ASan + UBSan tests: $((SECONDS - step_start)) s)"

echo "== ThreadSanitizer build: input pipeline, readers, data-parallel collectives"
step_start=$SECONDS
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTK_TSAN=ON -DTK_WERROR=ON -DTK_BUILD_BENCH=OFF \
  -DTK_CUDA=OFF >/dev/null  # also compiles the no-CUDA branch
cmake --build build-tsan -j"$jobs" --target trainkit_data_tests trainkit_collective_tests
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./build-tsan/tests/trainkit_data_tests
# Data parallel: the replicas' all-reduce group and their threads (nn/distribute/).
TK_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./build-tsan/tests/trainkit_collective_tests

echo "   (ThreadSanitizer build and tests: $((SECONDS - step_start)) s)"

echo "== fuzzing every parser (${FUZZ_SECONDS:-20} s each)"
step_start=$SECONDS
bash tools/run_fuzz.sh
echo "   (fuzzing: $((SECONDS - step_start)) s)"
echo "== all tests passed in $SECONDS s"
