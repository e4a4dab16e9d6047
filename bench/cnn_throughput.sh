#!/usr/bin/env bash
# Side-by-side training throughput of TensorFlow's tutorial CNN on Fashion-MNIST (batch 128, Adam,
# 2 threads): trainkit, PyTorch (eager) and Keras 3 on tensorflow-cpu, plus the sgemm roofline.
#
#   bench/cnn_throughput.sh [EPOCHS] [MAX_STEPS]   # default 2 timed epochs of 100 steps after a warm-up
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-2}"
STEPS="${2:-100}"
source bench/_setup.sh
bench_setup tk_bench_cnn
tk=$(./build/bench/tk_bench_cnn --epochs "$EPOCHS" --max-steps "$STEPS" | tail -n 1)  # the last line is the JSON
pt=$("$VENV/bin/python" bench/peers/torch_cnn.py --epochs "$EPOCHS" --max-steps "$STEPS" --threads 2)
ks=$("$VENV/bin/python" bench/peers/keras_cnn.py --epochs "$EPOCHS" --max-steps "$STEPS" --threads 2)
python3 - "$tk" "$pt" "$ks" <<'PY'
import json, sys
tk, pt, ks = (json.loads(a) for a in sys.argv[1:4])
print(f"{'':10s} {'samples/s':>10s} {'trainkit x':>10s}")
for r in (tk, pt, ks):
    print(f"{r['peer']:10s} {r['samples_per_s']:10.0f} {tk['samples_per_s'] / r['samples_per_s']:10.2f}")
print(f"trainkit: {tk['gflops_achieved']:.1f} GFLOP/s = {100 * tk['roofline_fraction']:.1f}% of sgemm(1024) "
      f"{tk['sgemm_gflops']['1024']:.0f} GFLOP/s (conv2 as one GEMM: {tk['sgemm_gflops']['conv2_as_gemm']:.0f})")
for r in (tk, pt, ks):
    print(json.dumps(r))
PY
