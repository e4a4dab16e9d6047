#!/usr/bin/env bash
# Learning against Keras (issue 32): the adding problem, T = 100. Keras 3 (jax; $TK_KERAS_VENV, default .venv-keras)
# makes the data and the model (LSTM(32) -> Dense(1), Adam 3e-3, MSE) and trains it; trainkit loads the same
# initial .keras file and trains on the same arrays with the same batch size and epochs. Prints both curves (one
# JSON line per epoch each) and, for each, the first epoch whose validation MSE is < 0.01.
#
#   bench/adding_problem.sh [EPOCHS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-30}"
OUT="${2:-$(mktemp -d /tmp/tk_adding.XXXXXX)}"
KERAS_VENV="${TK_KERAS_VENV:-.venv-keras}"
TK_VENV="${TK_VENV:-$KERAS_VENV}"  # bench_setup wants a venv; the Keras one serves
mkdir -p "$OUT"
source bench/_setup.sh
bench_setup tk_bench_adding
KERAS_BACKEND=jax "$KERAS_VENV/bin/python" bench/peers/keras_adding.py --out "$OUT" --epochs "$EPOCHS" 2>/dev/null |
  tee "$OUT/keras.jsonl"
./build/bench/tk_bench_adding "$OUT" --epochs "$EPOCHS" | tee "$OUT/trainkit.jsonl"
python3 - "$OUT" <<'PY'
import json, sys
for peer in ("keras", "trainkit"):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{peer}.jsonl") if l.startswith("{")]
    hit = next((r["epoch"] for r in rows if r["val_loss"] < 0.01), None)
    print(f"{peer}: val MSE < 0.01 first at epoch {hit}; final val MSE {rows[-1]['val_loss']:.5f} "
          f"after {rows[-1]['epoch']} epochs")
PY
