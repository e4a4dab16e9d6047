#!/usr/bin/env bash
# Side-by-side training throughput of the default MLP (784-256-128-10, Adam, batch 128, 2 threads): trainkit,
# PyTorch eager, PyTorch with torch.compile, and Keras 3 on tensorflow-cpu, interleaved for ROUNDS rounds
# (default 3); prints medians, ratios and trainkit's two-term roofline (bench/summarize.py).
#
#   bench/mlp_throughput.sh [EPOCHS] [ROUNDS]   # peers from $TK_VENV (default .venv), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-3}"
ROUNDS="${2:-3}"
source bench/_setup.sh
bench_setup tk_bench_mlp
runs=$(mktemp)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  ./build/bench/tk_bench_mlp --epochs "$EPOCHS" | tail -n 1 >>"$runs"  # the last line is the JSON
  "$VENV/bin/python" bench/peers/torch_mlp.py --epochs "$EPOCHS" --threads 2 >>"$runs"
  "$VENV/bin/python" bench/peers/torch_mlp.py --epochs "$EPOCHS" --threads 2 --compile >>"$runs"
  "$VENV/bin/python" bench/peers/keras_mlp.py --epochs "$EPOCHS" --threads 2 >>"$runs"
done
python3 bench/summarize.py "$runs"
cat "$runs"
rm -f "$runs"
