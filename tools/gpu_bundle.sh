#!/usr/bin/env bash
# Packs a CUDA build made here for tools/gpu_check.sh on a GPU machine that has no OpenBLAS, oneDNN, HDF5 or
# Open MPI (the project's GPU machine: nvcc and the CUDA wheels only). The bundle holds the trainkit CLI, the
# test binaries and every shared library they load except the C runtime and the big CUDA libraries (cuBLASLt,
# NCCL; cuDNN, which trainkit loads at run time), which the GPU machine has in its Python wheels (gpu_check.sh
# finds them). xz keeps it under the 64 MiB a device run may carry.
#
#   tools/gpu_bundle.sh [BUILD_DIR]          # default build/ (configured with -DTK_CUDA=ON)
#   tools/gpu_bundle.sh --with-data [BUILD]  # also Fashion-MNIST (xz, 27 MB) for the fit and throughput steps
#   -> gpu-carry/bundle.tar.xz (build/ with build/bundle-lib/); on the GPU machine, from the checkout's root:
#      GPU_CHECK_BUNDLE=gpu-carry/bundle.tar.xz tools/gpu_check.sh     (the device tool: carry ["gpu-carry"])
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_DATA=0
if [ "${1:-}" = "--with-data" ]; then
  WITH_DATA=1
  shift
fi
BUILD="${1:-build}"
OUTDIR=gpu-carry
BINS=("$BUILD/trainkit" "$BUILD/tests/trainkit_tests" "$BUILD/tests/trainkit_lease_holder")
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "gpu_bundle: $b is missing: build $BUILD with -DTK_CUDA=ON first" >&2; exit 2; }; done
grep -q "TK_CUDA:STRING=ON" "$BUILD/CMakeCache.txt" || { echo "gpu_bundle: $BUILD is not a TK_CUDA=ON build" >&2; exit 2; }
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bundle/build/bundle-lib" "$stage/bundle/build/tests" "$OUTDIR"
cp "$BUILD/trainkit" "$stage/bundle/build/"
cp "$BUILD/tests/trainkit_tests" "$BUILD/tests/trainkit_lease_holder" "$stage/bundle/build/tests/"
for b in tk_bench_mlp tk_bench_cnn; do  # the throughput benchmarks, for the side-by-side with PyTorch
  if [ -x "$BUILD/bench/$b" ]; then
    mkdir -p "$stage/bundle/build/bench"
    cp "$BUILD/bench/$b" "$stage/bundle/build/bench/"
    BINS+=("$BUILD/bench/$b")
  fi
done
# Every library the binaries load, but the C runtime (the GPU machine's is newer, and binaries built against an
# older glibc run on it) and the CUDA libraries the GPU machine has.
ldd "${BINS[@]}" | awk '/=> \//{print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | libgcc_s.so*) ;;
    libcublas* | libnccl* | libcudnn*) ;;  # cuDNN is dlopen'ed (not in ldd's list) and ~1 GB: never carried
    *) cp -L "$path" "$stage/bundle/build/bundle-lib/$name" ;;
  esac
done
# The tests name their source folder and the CLI by absolute path (TK_SOURCE_DIR, TK_CLI_PATH): gpu_check.sh links
# that path to the checkout it runs in.
{
  echo "source_dir=$(pwd)"
  echo "built_on=$(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'), $(date -u '+%Y-%m-%d %H:%M UTC')"
} >"$stage/bundle/build/BUILT"
tar -C "$stage/bundle" -cf - . | xz -T2 -6 >"$OUTDIR/bundle.tar.xz"
ls -la "$OUTDIR/bundle.tar.xz"
if [ "$WITH_DATA" = 1 ]; then
  src=/usr/share/datasets/fashion-mnist  # Debian's dataset-fashion-mnist (tools/install_deps.sh)
  mkdir -p "$OUTDIR/fashion-mnist"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [ -s "$OUTDIR/fashion-mnist/$f.xz" ] || zcat "$src/$f.gz" | xz -T2 -9 >"$OUTDIR/fashion-mnist/$f.xz"
  done
  du -sh "$OUTDIR/fashion-mnist"
fi
