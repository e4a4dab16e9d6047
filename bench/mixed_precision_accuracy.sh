#!/usr/bin/env bash
# Test accuracy under each dtype policy: `trainkit fit` on Fashion-MNIST for EPOCHS epochs (default 10) with
# SEEDS seeds (default "1 2 3"), for MODEL (default the MLP; MODEL=cnn for the tutorial CNN); prints each run
# and the mean per policy, and the difference to float32 in points.
#
#   bench/mixed_precision_accuracy.sh [EPOCHS] [SEEDS]     e.g. MODEL=cnn bench/mixed_precision_accuracy.sh 3 "1 2 3"
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS="${1:-10}"
SEEDS="${2:-1 2 3}"
MODEL="${MODEL:-dense:256:relu,dense:128:relu,dense:10}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target trainkit_cli >/dev/null
export TK_THREADS="${TK_THREADS:-2}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%F); model $MODEL, $EPOCHS epochs" >&2
runs=$(mktemp)
for seed in $SEEDS; do
  for policy in float32 mixed_bfloat16 mixed_float16; do
    acc=$(./build/trainkit fit --model "$MODEL" --epochs "$EPOCHS" --seed "$seed" --dtype-policy "$policy" --verbose 2 2>/dev/null |
      sed -n 's/.*test_accuracy: \([0-9.]*\).*/\1/p' | tail -n 1)
    echo "$policy $seed $acc" | tee -a "$runs" >&2
  done
done
python3 - "$runs" <<'PY'
import statistics, sys
acc = {}
for line in open(sys.argv[1]):
    policy, seed, a = line.split()
    acc.setdefault(policy, []).append(float(a))
base = statistics.mean(acc["float32"])
for policy, v in acc.items():
    m = statistics.mean(v)
    print("%-15s mean test accuracy %.4f (%s)  %+.2f points vs float32" % (policy, m, ", ".join("%.4f" % x for x in v), 100 * (m - base)))
PY
rm -f "$runs"
