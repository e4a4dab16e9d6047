#!/usr/bin/env bash
# One training step of a keras.applications model at 32x32, 2 threads, side by side: trainkit (the .keras file Keras
# saved), PyTorch eager (NCHW and channels-last; the model written in torch as Keras builds it) and Keras 3 on
# tensorflow-cpu, interleaved for ROUNDS rounds; prints medians and ratios (bench/summarize.py) and trainkit's planned
# and measured peak memory. MODEL: resnet50 (issue 31: batch 32, >= 1.3x PyTorch) or mobilenetv2 (batch 64, >= 1.0x).
# The PyTorch peer runs on $TK_TORCH_PYTHON when set (an interpreter with torch), else on the peers' venv. THREADS
# (default 2) sets everyone's threads: on a machine busy with other work, 1 keeps two threads from waiting on each
# other's time slices. TK_BASELINE=path/to/another/tk_bench_zoo (e.g. main's) also runs that binary in every round,
# as the peer "trainkit-baseline": a before/after in the same rounds.
#
#   bench/zoo_step.sh [BATCH] [ROUNDS] [MODEL]     # default 32, 3, resnet50
#   bench/zoo_step.sh 64 3 mobilenetv2
set -euo pipefail
cd "$(dirname "$0")/.."
BATCH="${1:-32}"
ROUNDS="${2:-3}"
MODEL="${3:-resnet50}"
THREADS="${THREADS:-2}"
source bench/_setup.sh
bench_setup tk_bench_zoo
export OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" TK_THREADS="$THREADS"
TORCH_PY="${TK_TORCH_PYTHON:-$VENV/bin/python}"
echo "peers: $("$TORCH_PY" -c 'import torch; print("torch", torch.__version__)'), $("$VENV/bin/python" -c \
  'import keras, tensorflow as tf; print("keras", keras.__version__, "tensorflow", tf.__version__)' 2>/dev/null)" >&2
work=$(mktemp -d)
"$VENV/bin/python" bench/peers/keras_zoo.py --model "$MODEL" --steps 1 --warmup 0 --save "$work/$MODEL.keras" >/dev/null
runs="$work/runs.jsonl"
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  ./build/bench/tk_bench_zoo --model "$work/$MODEL.keras" --batch-size "$BATCH" >>"$runs"
  if [ -n "${TK_BASELINE:-}" ]; then
    "$TK_BASELINE" --model "$work/$MODEL.keras" --batch-size "$BATCH" |
      sed 's/"peer":"trainkit"/"peer":"trainkit-baseline"/' >>"$runs"
  fi
  "$TORCH_PY" bench/peers/torch_zoo.py --model "$MODEL" --batch-size "$BATCH" --threads "$THREADS" >>"$runs"
  "$TORCH_PY" bench/peers/torch_zoo.py --model "$MODEL" --batch-size "$BATCH" --threads "$THREADS" --channels-last \
    >>"$runs"
  "$VENV/bin/python" bench/peers/keras_zoo.py --model "$MODEL" --batch-size "$BATCH" --threads "$THREADS" >>"$runs"
done
python3 bench/summarize.py "$runs"
cat "$runs"
rm -rf "$work"
