#!/usr/bin/env bash
# One training step of the issue-32 bidirectional-LSTM classifier (batch 64, T 80, embedding 128, 64 units) side by
# side: trainkit (the fused LstmSequence op), PyTorch eager nn.LSTM and Keras 3 (jax; $TK_KERAS_VENV, default
# .venv-keras); 2 threads, ROUNDS rounds interleaved (default 2). Prints the machine line, one JSON line per run and
# the ratios of the last round (peer median / trainkit median: > 1 means trainkit is faster).
#
#   bench/bilstm_step.sh [STEPS] [ROUNDS]
#   TK_BASELINE_BIN=/path/to/an/older/tk_bench_bilstm bench/bilstm_step.sh   # also runs that build, in each round
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-20}"
ROUNDS="${2:-2}"
KERAS_VENV="${TK_KERAS_VENV:-.venv-keras}"
source bench/_setup.sh
bench_setup tk_bench_bilstm
for round in $(seq "$ROUNDS"); do
  tk=$(./build/bench/tk_bench_bilstm --steps "$STEPS" | tail -1)  # the JSON line (the device line goes first)
  if [ -n "${TK_BASELINE_BIN:-}" ]; then
    "$TK_BASELINE_BIN" --steps "$STEPS" 2>/dev/null | tail -1 | sed 's/"peer":"trainkit/"peer":"baseline trainkit/'
  fi
  torch=$("$VENV/bin/python" bench/peers/torch_bilstm.py --steps "$STEPS" --threads 2)
  keras=$(KERAS_BACKEND=jax "$KERAS_VENV/bin/python" bench/peers/keras_bilstm.py --steps "$STEPS" 2>/dev/null | tail -1)
  printf '%s\n%s\n%s\n' "$tk" "$torch" "$keras"
done
python3 - "$tk" "$torch" "$keras" <<'PY'
import json, sys
tk, torch, keras = (json.loads(s) for s in sys.argv[1:])
print("ratios (peer step / trainkit step, medians): torch eager %.2fx, keras %.2fx"
      % (torch["step_ms_median"] / tk["step_ms_median"], keras["step_ms_median"] / tk["step_ms_median"]))
PY
