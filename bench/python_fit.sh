#!/usr/bin/env bash
# Issue 33's speed must-show: `tk.fit(keras_model, x, y, epochs=E)` — the bridge included — against
# `keras_model.fit(x, y, epochs=E)` on the TensorFlow backend, for the default MLP and the TensorFlow tutorial CNN,
# each run in its own process, interleaved for ROUNDS rounds (round r seeds both sides with SEED0 + r - 1: Keras'
# initial weights and dropout, trainkit's shuffling and dropout; Keras' shuffling is left unseeded, as a seeded
# TensorFlow replays one order every epoch: see bench/peers/bridge_fit.py); prints the median wall times, their ratio
# (target: MLP <= 0.5x, CNN <= 0.7x) and the mean test accuracies over the rounds' seeds that Keras' evaluate gives
# (target: within 0.5 points).
#
#   bench/python_fit.sh [MLP_EPOCHS] [CNN_EPOCHS] [ROUNDS]   # default 10 10 3; the peer venv gets `pip install .`
#   MODELS="cnn" SEED0=1 bench/python_fit.sh 10 10 3          # one model; seeds 1, 2, 3
set -euo pipefail
cd "$(dirname "$0")/.."
MLP_EPOCHS="${1:-10}"
CNN_EPOCHS="${2:-10}"
ROUNDS="${3:-3}"
MODELS="${MODELS:-mlp cnn}"
SEED0="${SEED0:-0}"
source bench/_setup.sh
bench_setup trainkit_cli
"$VENV/bin/pip" install -q --config-settings=build-dir=build-py . >&2
runs=$(mktemp)
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS" >&2
  for model in $MODELS; do
    epochs=$MLP_EPOCHS
    [ "$model" = cnn ] && epochs=$CNN_EPOCHS
    for runner in keras trainkit; do
      "$VENV/bin/python" bench/peers/bridge_fit.py --runner "$runner" --model "$model" --epochs "$epochs" \
        --seed $((SEED0 + round - 1)) >>"$runs"
    done
  done
done
"$VENV/bin/python" - "$runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for model, target in (("mlp", 0.5), ("cnn", 0.7)):
    by = {r: [x for x in rows if x["model"] == model and x["runner"] == r] for r in ("keras", "trainkit")}
    if not by["keras"] or not by["trainkit"]:
        continue
    wall = {r: statistics.median(x["wall_s"] for x in v) for r, v in by.items()}
    acc = {r: statistics.mean(x["test_accuracy"] for x in v) for r, v in by.items()}
    print("%s, %d epochs: keras.fit (TF) %.1f s, tk.fit %.1f s -> %.2fx the wall time (target <= %.1fx); "
          "mean test accuracy keras %.4f, trainkit %.4f (%+.2f points)"
          % (model, by["keras"][0]["epochs"], wall["keras"], wall["trainkit"], wall["trainkit"] / wall["keras"],
             target, acc["keras"], acc["trainkit"], 100 * (acc["trainkit"] - acc["keras"])))
PY
cat "$runs"
rm -f "$runs"
