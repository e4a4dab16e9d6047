#!/usr/bin/env bash
# Interleaved A/B throughput of two builds on the same machine in the same minutes: runs the MLP and CNN
# benchmarks of build A and build B alternately, ROUNDS times each, and prints the median samples/s of each
# and B's change. Used for "not slower than before" checks (docs/benchmarks.md).
#   bench/ab_compare.sh /path/to/old/build /path/to/new/build [ROUNDS=5]
set -euo pipefail
a="$1"; b="$2"; rounds="${3:-5}"
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
rate() { sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p'; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); isa: $(grep -o -m1 -w 'avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for bench in "tk_bench_mlp --epochs 2" "tk_bench_cnn --max-steps 40"; do
  ra=(); rb=()
  for ((i = 0; i < rounds; ++i)); do
    ra+=("$("$a"/bench/$bench 2>/dev/null | rate)")
    rb+=("$("$b"/bench/$bench 2>/dev/null | rate)")
  done
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  printf '%-28s A %s  B %s  (A runs: %s; B runs: %s)  B/A = %s\n' "${bench%% *}" "$ma" "$mb" "${ra[*]}" "${rb[*]}" \
    "$(awk -v x="$ma" -v y="$mb" 'BEGIN { printf "%.3f", y / x }')"
done
