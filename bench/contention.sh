#!/usr/bin/env bash
# Training throughput alone and next to one and two busy processes (each a single-threaded spin loop), for the
# default MLP and the tutorial CNN, with the thread count pinned (TK_THREADS=N: every step uses N threads, the
# behaviour before threads.h) and adaptive (TK_THREADS=auto, the default). Prints one line per run and the
# contended/alone epoch ratios; each row records the load average at its start (the machine may be shared).
# With a peers' virtual environment ($TK_VENV, default .venv; bench/_setup.sh makes one), PyTorch eager runs the
# same steps next to the same spinners with torch.set_num_threads(OMP_NUM_THREADS), and trainkit's samples/s
# (adaptive threads) is printed as a multiple of PyTorch's in each situation.
#
#   bash bench/contention.sh [build]        # OMP_NUM_THREADS defaults to the number of cores
set -euo pipefail
BUILD="${1:-build}"
BIN="$BUILD/bench/tk_bench_contention"
[ -x "$BIN" ] || { echo "build the target first: cmake --build $BUILD --target tk_bench_contention" >&2; exit 1; }
CORES=$(nproc)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$CORES}"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $CORES cores, OMP_NUM_THREADS=$OMP_NUM_THREADS; $(date -u '+%F %T') UTC"
SPINNERS=()
spin() { for _ in $(seq "$1"); do sh -c 'while :; do :; done' & SPINNERS+=($!); done; }
unspin() { for p in "${SPINNERS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done; SPINNERS=(); }
trap unspin EXIT
run() {  # model steps epochs threads spinners
  spin "$5"
  sleep 0.5
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local out; out=$(TK_THREADS="$4" "$BIN" --model "$1" --steps "$2" --epochs "$3" 2>/dev/null)
  unspin
  local epoch; epoch=$(sed -n 's/.*"epoch_s":\([0-9.]*\).*/\1/p' <<<"$out")
  printf '%-4s threads=%-5s spinners=%d load=%-5s %s\n' "$1" "$4" "$5" "$load" "$out" >&2
  echo "$epoch"
}
VENV="${TK_VENV:-.venv}"
torch_run() {  # model steps epochs spinners -> samples/s of PyTorch eager
  spin "$4"
  sleep 0.5
  local out; out=$("$VENV/bin/python" "bench/peers/torch_$1.py" --max-steps "$2" --epochs "$3" --threads "$OMP_NUM_THREADS" 2>/dev/null)
  unspin
  printf '%-4s pytorch spinners=%d %s\n' "$1" "$4" "$out" >&2
  sed -n 's/.*"samples_per_s": \([0-9.]*\).*/\1/p' <<<"$out"
}
for model in mlp cnn; do
  if [ "$model" = mlp ]; then steps=100 epochs=3; else steps=20 epochs=2; fi
  if [ -x "$VENV/bin/python" ]; then
    for spinners in 0 1 2; do
      ours=$(run $model $steps $epochs auto "$spinners")
      theirs=$(torch_run $model $steps $epochs "$spinners")
      awk -v m=$model -v s="$spinners" -v e="$ours" -v n=$((steps * 128)) -v p="$theirs" 'BEGIN {
        printf "%s next to %d spinners: trainkit (auto) %.0f samples/s, PyTorch eager %.0f samples/s: trainkit %.2fx\n",
               m, s, n / e, p, n / e / p }'
    done
  fi
  for threads in "$OMP_NUM_THREADS" auto; do
    alone=$(run $model $steps $epochs "$threads" 0)
    one=$(run $model $steps $epochs "$threads" 1)
    two=$(run $model $steps $epochs "$threads" 2)
    again=$(run $model $steps $epochs "$threads" 0)
    awk -v m=$model -v t="$threads" -v a="$alone" -v o="$one" -v w="$two" -v g="$again" 'BEGIN {
      printf "%s TK_THREADS=%s: epoch alone %.3f s (again at the end %.3f s); next to 1 spinner %.2fx, next to 2 spinners %.2fx\n",
             m, t, a, g, o / a, w / a }'
  done
done
