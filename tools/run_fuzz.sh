#!/usr/bin/env bash
# Builds every libFuzzer target in fuzz/ (clang, ASan + UBSan) and runs each for a bounded time on its
# committed seed corpus (fuzz/corpus/<name>/). A finding (crash, sanitizer report, leak, an exception
# other than tk::Error) fails the script and leaves the input in build-fuzz/findings/.
#   bash tools/run_fuzz.sh            # 20 s per target (CI)
#   FUZZ_SECONDS=300 bash tools/run_fuzz.sh fuzz_csv
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-20}"
out=build-fuzz
mkdir -p "$out/obj" "$out/findings"
CXX="${FUZZ_CXX:-clang++}"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -Iinclude -Isrc -I/usr/include/hdf5/serial)
# The readers and what they stand on (core, runtime, data, the training-state file), compiled once for all targets.
objs=()
for src in src/core/*.cpp src/runtime/*.cpp src/data/*.cpp src/data/formats/*.cpp src/io/atomic_file.cpp src/io/file_staging.cpp \
           src/io/training_state_file.cpp; do
  obj="$out/obj/$(echo "$src" | tr '/' '_').o"
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then "$CXX" "${flags[@]}" -c "$src" -o "$obj"; fi
  objs+=("$obj")
done
libs=(-lz -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5 -lzip -pthread)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
for t in "${targets[@]}"; do
  echo "== $t: ${seconds}s"
  # Extra sources a target names on a "// fuzz-sources: a.cpp b.cpp" line (e.g. src/io/ parsers).
  extra=()
  for src in $(sed -n 's|^// fuzz-sources: ||p' "fuzz/$t.cpp"); do
    obj="$out/obj/$(echo "$src" | tr '/' '_').o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then "$CXX" "${flags[@]}" -c "$src" -o "$obj"; fi
    extra+=("$obj")
  done
  "$CXX" "${flags[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "${objs[@]}" ${extra[@]+"${extra[@]}"} "${libs[@]}" -o "$out/$t"
  corpus="$out/corpus/$t"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$t" ] && cp -r "fuzz/corpus/$t/." "$corpus/"
  (cd "$out/findings" && ASAN_OPTIONS=detect_leaks=1 "../$t" -max_total_time="$seconds" -max_len=8192 \
     -rss_limit_mb=2048 -print_final_stats=0 "../corpus/$t" 2>&1 | tail -n 3)
done
echo "== fuzzing: no findings"
