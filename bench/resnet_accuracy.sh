#!/usr/bin/env bash
# Issue 31's accuracy must-show: a small ResNet (a 3x3 stem and three stages of residual blocks with
# BatchNormalization, Rescaling(1/255) inside the model) on Fashion-MNIST, 10 epochs, Adam, batch 128. For each seed,
# Keras 3 (bench/peers/keras_resnet_accuracy.py, jax backend in $TK_KERAS_VENV, default .venv-keras) seeds and saves
# the untrained model as .keras; `trainkit fit --model` trains that file and Keras trains the same file; both report
# the test accuracy on the 10,000 test images. Prints each run, the means, the difference in points (target: within
# 0.5) and the verdict against 0.925. Each run's JSON line is appended to $RUNS (default a temporary file) as it ends.
#
#   bench/resnet_accuracy.sh [EPOCHS] [SEEDS]   # default 10, "1 2 3"
#   bench/resnet_accuracy.sh --summarize RUNS  # the summary of the runs in RUNS (e.g. seeds run in parallel)
# The model's size: FILTERS=16,32,64 BLOCKS=1 FIRST_STRIDE=2 by default (stages at 14x14, 7x7, 4x4: ~2.7 M
# multiply-adds a sample; FIRST_STRIDE=1 runs stage 1 at 28x28, ~9 M, about 4.5x the time a step). How it trains, all
# inside the saved model so both sides do the same: LR_SCHEDULE=cosine (Adam's rate from 1e-3 down to 0 over the
# run: CosineDecay), DROPOUT=0.3 (before the Dense layer), FLIP=1 (RandomFlip("horizontal") after the Rescaling), L2=x
# (kernel_regularizer=L2(x) on every kernel); defaults: none of them.
# TRAINKIT=path runs that trainkit binary instead of building build/trainkit.
# On a machine shared with other work, TK_THREADS=1 avoids two threads waiting on each other's time slices.
set -euo pipefail
cd "$(dirname "$0")/.."
summarize() {
  python3 - "$1" <<'PY'
import json, statistics, sys
acc = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        acc.setdefault(r["peer"].split("-")[0], {})[r["seed"]] = r["test_accuracy"]
tk, keras = acc.get("trainkit", {}), acc.get("keras", {})
seeds = sorted(set(tk) & set(keras))
if not seeds:
    sys.exit("no seed ran on both sides")
mt, mk = statistics.mean(tk[s] for s in seeds), statistics.mean(keras[s] for s in seeds)
print("seeds %s: trainkit %s mean %.4f; keras %s mean %.4f" % (
    seeds, [tk[s] for s in seeds], mt, [keras[s] for s in seeds], mk))
diff = 100 * (mt - mk)
print("trainkit - keras: %+.2f points (target: within 0.5): %s" % (diff, "met" if abs(diff) <= 0.5 else "NOT met"))
print("trainkit mean %.4f vs 0.925: %s" % (mt, "met" if mt >= 0.925 else "NOT met"))
PY
}
if [ "${1:-}" = "--summarize" ]; then
  summarize "$2"
  exit
fi
EPOCHS="${1:-10}"
SEEDS="${2:-1 2 3}"
FILTERS="${FILTERS:-16,32,64}"
BLOCKS="${BLOCKS:-1}"
FIRST_STRIDE="${FIRST_STRIDE:-2}"
KERAS_VENV="${TK_KERAS_VENV:-.venv-keras}"
export KERAS_BACKEND=jax TK_THREADS="${TK_THREADS:-2}"
export OMP_NUM_THREADS="$TK_THREADS"  # oneDNN runs on OpenMP threads
if [ -z "${TRAINKIT:-}" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j2 --target trainkit_cli >/dev/null
  TRAINKIT=./build/trainkit
fi
TRAIN_OPTS=(--lr-schedule "${LR_SCHEDULE:-constant}" --dropout "${DROPOUT:-0}" --l2 "${L2:-0}")
[ "${FLIP:-0}" = 1 ] && TRAIN_OPTS+=(--flip)
isa="$(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u |
  tr '\n' ' ')"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, ISA: ${isa% };" \
  "$(date -u '+%F %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg); trainkit threads $TK_THREADS" >&2
versions='import keras, jax; print("keras", keras.__version__, "jax", jax.__version__)'
echo "peer: $("$KERAS_VENV/bin/python" -c "$versions")" >&2
echo "model: filters $FILTERS, $BLOCKS block(s) per stage, first stride $FIRST_STRIDE; $EPOCHS epochs, batch 128," \
  "seeds $SEEDS; ${TRAIN_OPTS[*]}" >&2
work=$(mktemp -d)
RUNS="${RUNS:-$work/runs.jsonl}"
for seed in $SEEDS; do
  model="$work/small_resnet_s$seed.keras"
  "$KERAS_VENV/bin/python" bench/peers/keras_resnet_accuracy.py --seed "$seed" --filters "$FILTERS" \
    --blocks "$BLOCKS" --first-stride "$FIRST_STRIDE" --epochs "$EPOCHS" "${TRAIN_OPTS[@]}" --save "$model" >&2
  start=$(date +%s)
  log="$work/trainkit_s$seed.log"
  "$TRAINKIT" fit --model "$model" --epochs "$EPOCHS" --batch-size 128 --seed "$seed" --verbose 2 --no-summary \
    >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  acc=$(sed -n 's/.*test_accuracy: \([0-9.]*\).*/\1/p' "$log" | tail -n 1)
  echo "{\"peer\": \"trainkit\", \"seed\": $seed, \"epochs\": $EPOCHS, \"test_accuracy\": $acc," \
    "\"fit_seconds\": $(($(date +%s) - start))}" | tee -a "$RUNS"
  "$KERAS_VENV/bin/python" bench/peers/keras_resnet_accuracy.py --seed "$seed" --train "$model" --epochs "$EPOCHS" \
    2>"$work/keras_s$seed.log" | tee -a "$RUNS"
done
summarize "$RUNS"
rm -rf "$work"
