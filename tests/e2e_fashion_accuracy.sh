#!/usr/bin/env bash
# End to end: `trainkit fit` with its defaults (MLP 784-256-128-10, Adam, batch 128, 10 epochs) must reach
# a Fashion-MNIST test accuracy of at least 0.88 (the published MLP baseline is 0.883).
set -euo pipefail
cli="$1"
if [ ! -d "${TK_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" ]; then
  echo "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipping"; exit 77
fi
out=$("$cli" fit --verbose 2 --no-summary)
echo "$out"
acc=$(printf '%s\n' "$out" | sed -n 's/.*test_accuracy: \([0-9.]*\).*/\1/p')
[ -n "$acc" ] || { echo "no test_accuracy in the output"; exit 1; }
awk -v a="$acc" 'BEGIN { if (a + 0 >= 0.88) { print "test accuracy " a " >= 0.88"; exit 0 } print "test accuracy " a " < 0.88"; exit 1 }'
