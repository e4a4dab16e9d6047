#!/usr/bin/env bash
# Side-by-side training throughput of TensorFlow's tutorial CNN on Fashion-MNIST (batch 128, Adam, 2 threads):
# trainkit, PyTorch eager, PyTorch with torch.compile, and Keras 3 on tensorflow-cpu, interleaved for ROUNDS
# rounds (default 3); prints medians, ratios and trainkit's two-term roofline (bench/summarize.py).
#
#   bench/cnn_throughput.sh [EPOCHS] [MAX_STEPS] [ROUNDS]   # default 2 timed epochs of 100 steps after a warm-up
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-2}"
STEPS="${2:-100}"
ROUNDS="${3:-3}"
source bench/_setup.sh
bench_setup tk_bench_cnn
runs=$(mktemp)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  ./build/bench/tk_bench_cnn --epochs "$EPOCHS" --max-steps "$STEPS" | tail -n 1 >>"$runs"
  "$VENV/bin/python" bench/peers/torch_cnn.py --epochs "$EPOCHS" --max-steps "$STEPS" --threads 2 >>"$runs"
  "$VENV/bin/python" bench/peers/torch_cnn.py --epochs "$EPOCHS" --max-steps "$STEPS" --threads 2 --compile >>"$runs"
  "$VENV/bin/python" bench/peers/keras_cnn.py --epochs "$EPOCHS" --max-steps "$STEPS" --threads 2 >>"$runs"
done
python3 bench/summarize.py "$runs"
cat "$runs"
rm -f "$runs"
