#!/usr/bin/env bash
# End to end: `trainkit fit [ARGS]` must reach a Fashion-MNIST test accuracy of at least THRESHOLD.
#   e2e_fashion_accuracy.sh CLI THRESHOLD [ARGS...]
# Defaults (MLP 784-256-128-10, Adam, batch 128, 10 epochs) with 0.88: the published MLP baseline is 0.883.
# --model cnn --epochs 5 with 0.905: TensorFlow's tutorial reports 0.916 for that CNN after 10 epochs; trainkit
# reached 0.9149 after 5 (default seed, 2026-12-03).
set -euo pipefail
cli="$1"
threshold="$2"
shift 2
if [ ! -d "${TK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" ]; then
  echo "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipping"; exit 77
fi
out=$("$cli" fit --verbose 2 --no-summary "$@")
echo "$out"
acc=$(printf '%s\n' "$out" | sed -n 's/.*test_accuracy: \([0-9.]*\).*/\1/p')
[ -n "$acc" ] || { echo "no test_accuracy in the output"; exit 1; }
awk -v a="$acc" -v t="$threshold" 'BEGIN { if (a + 0 >= t + 0) { print "test accuracy " a " >= " t; exit 0 } print "test accuracy " a " < " t; exit 1 }'
