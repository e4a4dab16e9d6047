#!/usr/bin/env bash
# Sets everything up and runs the main job: `trainkit fit` (MLP 784-256-128-10 on Fashion-MNIST).
# Extra arguments go to `trainkit fit`, e.g. tools/run_main.sh --epochs 3 --optimizer sgd -l 0.05
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTK_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target trainkit_cli
exec ./build/trainkit fit "$@"
