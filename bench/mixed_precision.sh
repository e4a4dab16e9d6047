#!/usr/bin/env bash
# Mixed precision side by side (2 threads, interleaved ROUNDS rounds, medians): samples/s of trainkit float32,
# trainkit mixed_bfloat16 and mixed_float16, PyTorch eager float32 and PyTorch CPU autocast (bfloat16), on the
# default MLP (and the tutorial CNN with CNN=1, MAX_STEPS batches per epoch). Prints the CPU and its ISA: on a
# CPU with AVX512_BF16/AMX trainkit's bfloat16 GEMMs and convolutions run natively on oneDNN; elsewhere they are
# widened to float32 (TK_PROFILE=1 says which).
#
#   bench/mixed_precision.sh [EPOCHS] [ROUNDS]   # peers from $TK_VENV (default .venv), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-2}"
ROUNDS="${2:-3}"
source bench/_setup.sh
if [ "${CNN:-0}" = 1 ]; then
  bench_setup tk_bench_cnn
  tk=(./build/bench/tk_bench_cnn --max-steps "${MAX_STEPS:-60}")
  peer=(bench/peers/torch_cnn.py --max-steps "${MAX_STEPS:-60}")
else
  bench_setup tk_bench_mlp
  tk=(./build/bench/tk_bench_mlp)
  peer=(bench/peers/torch_mlp.py)
fi
runs=$(mktemp)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for policy in float32 mixed_bfloat16 mixed_float16; do
    "${tk[@]}" --epochs "$EPOCHS" --dtype-policy "$policy" | tail -n 1 >>"$runs"
  done
  "$VENV/bin/python" "${peer[@]}" --epochs "$EPOCHS" --threads 2 >>"$runs"
  "$VENV/bin/python" "${peer[@]}" --epochs "$EPOCHS" --threads 2 --autocast >>"$runs"
done
python3 - "$runs" <<'PY'
import json, statistics, sys
rows = {}
cpu = ""
for line in open(sys.argv[1]):
    d = json.loads(line)
    name = d["peer"] + (" " + d["dtype_policy"] if "dtype_policy" in d else "")
    cpu = d.get("cpu", cpu)
    rows.setdefault(name, []).append(d["samples_per_s"])
print("cpu:", cpu)
med = {k: statistics.median(v) for k, v in rows.items()}
base = med.get("trainkit float32", 1.0)
for k, v in med.items():
    print("%-32s %10.0f samples/s  (%s)  %.2fx trainkit float32" % (k, v, ", ".join("%.0f" % x for x in rows[k]), v / base))
PY
rm -f "$runs"
