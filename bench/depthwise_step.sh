#!/usr/bin/env bash
# One DepthwiseConv2D training step (batch 64, 16x16x96, 3x3; MobileNetV2-like) side by side: trainkit on oneDNN's
# grouped convolution, trainkit's direct grouped kernels (TK_CONV=im2col), PyTorch eager; 2 threads, ROUNDS rounds
# interleaved (default 3). Prints the machine line and one JSON line per run.
#
#   bench/depthwise_step.sh [STEPS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-50}"
ROUNDS="${2:-3}"
source bench/_setup.sh
bench_setup tk_bench_depthwise
for round in $(seq "$ROUNDS"); do
  ./build/bench/tk_bench_depthwise --steps "$STEPS"
  TK_CONV=im2col ./build/bench/tk_bench_depthwise --steps "$STEPS"
  "$VENV/bin/python" bench/peers/torch_depthwise.py --steps "$STEPS" --threads 2
done
