#!/usr/bin/env bash
# Training throughput alone and next to one and two busy processes (each a single-threaded spin loop), for the
# default MLP and the tutorial CNN, with the thread count pinned (TK_THREADS=N: every step uses N threads, the
# behaviour before threads.h) and adaptive (TK_THREADS=auto, the default). Prints one line per run and the
# contended/alone epoch ratios; each row records the load average at its start (the machine may be shared).
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
for model in mlp cnn; do
  if [ "$model" = mlp ]; then steps=100 epochs=3; else steps=20 epochs=2; fi
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
