#!/usr/bin/env bash
# Learning against Keras (issue 32): a byte-level causal LSTM language model on the concatenated license texts of
# /usr/share/common-licenses. Keras 3 (jax; $TK_KERAS_VENV, default .venv-keras) writes the text and the untrained
# model and trains it; trainkit loads the same .keras file and trains on the same sequences (Dataset::from_text_file)
# for the same number of steps. Prints both curves and the final validation losses' relative difference.
#
#   bench/bytelm.sh [EPOCHS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-3}"
OUT="${2:-$(mktemp -d /tmp/tk_bytelm.XXXXXX)}"
KERAS_VENV="${TK_KERAS_VENV:-.venv-keras}"
TK_VENV="${TK_VENV:-$KERAS_VENV}"
mkdir -p "$OUT"
source bench/_setup.sh
bench_setup tk_bench_bytelm
KERAS_BACKEND=jax "$KERAS_VENV/bin/python" bench/peers/keras_bytelm.py --out "$OUT" --epochs "$EPOCHS" 2>/dev/null |
  tee "$OUT/keras.jsonl"
./build/bench/tk_bench_bytelm "$OUT" --epochs "$EPOCHS" | tee "$OUT/trainkit.jsonl"
python3 - "$OUT" <<'PY'
import json, sys
k, t = ([json.loads(l) for l in open(f"{sys.argv[1]}/{p}.jsonl") if l.startswith("{")][-1] for p in ("keras", "trainkit"))
assert k["steps"] == t["steps"] and k["sequences"] == t["sequences"], (k, t)
print(f"after {t['steps']} steps: val loss keras {k['val_loss']:.4f}, trainkit {t['val_loss']:.4f} "
      f"({100 * (t['val_loss'] / k['val_loss'] - 1):+.2f}%)")
PY
