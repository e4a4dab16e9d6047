#!/usr/bin/env bash
# One training step of keras.applications' ResNet50 at 32x32, batch 32, 2 threads, side by side: trainkit (the
# .keras file Keras saved), PyTorch eager (NCHW and channels-last; the model written in torch as Keras builds it) and
# Keras 3 on tensorflow-cpu, interleaved for ROUNDS rounds; prints medians and ratios (bench/summarize.py) and
# trainkit's planned and measured peak memory.
#
#   bench/zoo_step.sh [BATCH] [ROUNDS]     # default 32, 3
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH="${1:-32}"
ROUNDS="${2:-3}"
source bench/_setup.sh
bench_setup tk_bench_zoo
work=$(mktemp -d)
"$VENV/bin/python" bench/peers/keras_zoo.py --model resnet50 --steps 1 --warmup 0 --save "$work/resnet50.keras" >/dev/null
runs="$work/runs.jsonl"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  OMP_NUM_THREADS=2 TK_THREADS=2 ./build/bench/tk_bench_zoo --model "$work/resnet50.keras" --batch-size "$BATCH" >>"$runs"
  "$VENV/bin/python" bench/peers/torch_zoo.py --batch-size "$BATCH" >>"$runs"
  "$VENV/bin/python" bench/peers/torch_zoo.py --batch-size "$BATCH" --channels-last >>"$runs"
  "$VENV/bin/python" bench/peers/keras_zoo.py --model resnet50 --batch-size "$BATCH" >>"$runs"
done
python3 bench/summarize.py "$runs"
cat "$runs"
rm -rf "$work"
