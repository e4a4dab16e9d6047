#!/usr/bin/env bash
# Side-by-side training throughput of the default MLP (784-256-128-10, Adam, batch 128, 2 threads):
# trainkit, PyTorch (eager) and Keras 3 on tensorflow-cpu, plus the sgemm roofline, in one run.
#
#   bench/mlp_throughput.sh [EPOCHS]          # peers from $TK_VENV (default .venv), created if missing
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-3}"
source bench/_setup.sh
bench_setup tk_bench_mlp
tk=$(./build/bench/tk_bench_mlp --epochs "$EPOCHS" | tail -n 1)  # the last line is the JSON
pt=$("$VENV/bin/python" bench/peers/torch_mlp.py --epochs "$EPOCHS" --threads 2)
ks=$("$VENV/bin/python" bench/peers/keras_mlp.py --epochs "$EPOCHS" --threads 2)
python3 - "$tk" "$pt" "$ks" <<'PY'
import json, sys
tk, pt, ks = (json.loads(a) for a in sys.argv[1:4])
print(f"{'':10s} {'samples/s':>10s} {'trainkit x':>10s}")
for r in (tk, pt, ks):
    print(f"{r['peer']:10s} {r['samples_per_s']:10.0f} {tk['samples_per_s'] / r['samples_per_s']:10.2f}")
print(f"trainkit: {tk['gflops_achieved']:.1f} GFLOP/s = {100 * tk['roofline_fraction']:.1f}% of sgemm(1024) "
      f"{tk['sgemm_gflops']['1024']:.0f} GFLOP/s (sgemm 128x256x784: {tk['sgemm_gflops']['mlp_128x256x784']:.0f})")
for r in (tk, pt, ks):
    print(json.dumps(r))
PY
